// NCCL conformance harness: loads weft's libnccl.so.2 and the real NCCL side by side (dlopen,
// RTLD_LOCAL | RTLD_DEEPBIND), runs the same calls through each with the same random inputs, and
// checks every rank's output against the float64 / integer host reference of reference.h and
// against the real NCCL. Layouts: a process per GPU (forked here), one thread driving every GPU
// (ncclCommInitAll, or ncclCommInitRankConfig inside a group), a thread per GPU. Modes: eager, or
// captured in a CUDA graph and replayed with fresh inputs; buffers plain or in symmetric windows.
// Also checks config hints, argument errors and ncclGetLastError. Every wait is bounded.
//
//   conformance --weft target/nccl/libnccl.so.2 --nccl /path/to/real/libnccl.so.2
//       [--layout processes|threads|single] [--init group|all] [--mode eager|graph] [--windows]
//       [--quick] [--counts 1,7,...] [--colls ...] [--types ...] [--ops ...] [--gpus N]
//       [--seed S] [--timeout SECONDS] [--replays R] [--no-hints] [--no-api] [--allow-fallback]
//
// Prints one line per check group, then `N passed, M failed`; exits 1 on a failure, 2 on a usage
// or setup error, 3 when a step exceeded its time limit (the line says which step hung).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "reference.h"

using namespace conformance;

namespace {

static_assert((int)ncclFloat8e5m2 == kFp8E5M2 && (int)ncclBfloat16 == kBfloat16 && (int)ncclAvg == kAvg,
              "reference.h numbers types and operators as nccl.h does");

constexpr int kMaxRanks = 16;
constexpr int kMaxLibs = 2;

// ---- options ----------------------------------------------------------------------------------

struct Options {
  std::string lib_path[kMaxLibs];  // [0] the real NCCL, [1] weft (either may be empty)
  std::string layout = "threads", init = "group", mode = "eager";
  bool windows = false, hints = true, api = true, allow_fallback = false;
  std::vector<size_t> counts{1, 7, 1023, 4099, 1048579};
  std::vector<size_t> big_counts;  // --quick: counts run only for a few (coll, type) pairs
  std::vector<int> colls, types, ops;
  int gpus = 0, replays = 3;
  uint64_t seed = 0;
  double timeout = 120;
  double total_timeout = 3000;  // the parent's bound on the forked ranks
  std::string capture;  // empty: thread-local, relaxed for --layout single (see parse)
};
Options opt;
const char* kLibTag[kMaxLibs] = {"nccl", "weft"};

[[noreturn]] void die(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  _exit(code);
}

std::string context() {
  return "[layout " + opt.layout + (opt.layout == "single" ? " init " + opt.init : "") + ", " + opt.mode + ", " +
         (opt.windows ? "windows" : "no windows") + "]";
}

// ---- the watchdog: every step has a deadline -----------------------------------------------------

struct Watch {
  std::atomic<int64_t> deadline_ms{0};  // 0: idle
  char what[512] = {0};
  std::mutex m;
};
Watch watches[kMaxRanks];

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watch(int slot, double seconds, const std::string& what) {
  std::lock_guard<std::mutex> g(watches[slot].m);
  std::snprintf(watches[slot].what, sizeof watches[slot].what, "%s", what.c_str());
  watches[slot].deadline_ms = now_ms() + (int64_t)(seconds * 1000);
}

void unwatch(int slot) { watches[slot].deadline_ms = 0; }

void start_watchdog() {
  std::thread([] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      for (auto& w : watches) {
        int64_t d = w.deadline_ms.load();
        if (d && now_ms() > d) {
          std::lock_guard<std::mutex> g(w.m);
          die(3, "HANG %s: %s did not finish within %.0f s", context().c_str(), w.what, opt.timeout);
        }
      }
    }
  }).detach();
}

// ---- shared state (anonymous shared memory, so forked ranks see it too) -----------------------------

struct Slot {
  int status;  // 0 pass, 1 pass with a note, 2 fail
  char msg[1536];
};

struct Shared {
  std::atomic<uint32_t> bar_count, bar_gen;
  std::atomic<int> ids_ready;
  ncclUniqueId ids[kMaxLibs];
  int gpus;
  std::atomic<int> passed, failed;
  Slot slots[kMaxRanks];
};
Shared* shared = nullptr;
int nranks = 0;

/// Waits until every driver (process or thread) reaches the same barrier; bounded.
void barrier(int drivers, const char* what, int slot) {
  if (drivers <= 1) return;
  uint32_t gen = shared->bar_gen.load();
  if (shared->bar_count.fetch_add(1) + 1 == (uint32_t)drivers) {
    shared->bar_count = 0;
    shared->bar_gen.fetch_add(1);
    return;
  }
  int64_t deadline = now_ms() + (int64_t)(opt.timeout * 1000);
  while (shared->bar_gen.load() == gen) {
    if (now_ms() > deadline) {
      die(3, "HANG %s: rank %d waited %.0f s at the barrier after '%s' (another rank is stuck or died)",
          context().c_str(), slot, opt.timeout, what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// ---- the two libraries ----------------------------------------------------------------------------

#define NCCL_FUNCTIONS(X)                                                                                    \
  X(GetVersion) X(GetUniqueId) X(CommInitRankConfig) X(CommInitAll) X(CommFinalize) X(CommDestroy)             \
  X(GetErrorString) X(GetLastError) X(GroupStart) X(GroupEnd) X(AllReduce) X(AllGather) X(ReduceScatter)       \
  X(Broadcast) X(Reduce) X(AlltoAll) X(Gather) X(Scatter) X(Send) X(Recv) X(RedOpCreatePreMulSum)               \
  X(RedOpDestroy) X(MemAlloc) X(MemFree) X(CommWindowRegister) X(CommWindowDeregister) X(CommUserRank)         \
  X(CommCount)

struct Lib {
  const char* tag = nullptr;
  void* handle = nullptr;
#define DECLARE(name) decltype(&nccl##name) name = nullptr;
  NCCL_FUNCTIONS(DECLARE)
#undef DECLARE
  std::string err(ncclResult_t rc, ncclComm_t comm) const {
    const char* last = GetLastError(comm);
    return std::string(GetErrorString(rc)) + " (" + std::to_string((int)rc) + "; last error: " +
           (last && *last ? last : "<empty>") + ")";
  }
};
Lib libs[kMaxLibs];
std::vector<int> active;  // indices of the loaded libraries, the real NCCL first

void load_libs() {
  for (int l = 0; l < kMaxLibs; l++) {
    if (opt.lib_path[l].empty()) continue;
    Lib& L = libs[l];
    L.tag = kLibTag[l];
    L.handle = dlopen(opt.lib_path[l].c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!L.handle) die(2, "cannot load %s (%s): %s", L.tag, opt.lib_path[l].c_str(), dlerror());
#define RESOLVE(name)                                                                          \
  L.name = reinterpret_cast<decltype(&nccl##name)>(dlsym(L.handle, "nccl" #name));             \
  if (!L.name) die(2, "%s (%s) does not export nccl" #name, L.tag, opt.lib_path[l].c_str());
    NCCL_FUNCTIONS(RESOLVE)
#undef RESOLVE
    int version = 0;
    L.GetVersion(&version);
    std::printf("%s: %s, version %d\n", L.tag, opt.lib_path[l].c_str(), version);
    active.push_back(l);
  }
  if (active.empty()) die(2, "give --weft PATH and/or --nccl PATH");
}

#define CUDA(call)                                                                                        \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    if (e_ != cudaSuccess) die(2, "%s:%d %s: %s (%s)", __FILE__, __LINE__, #call, cudaGetErrorString(e_), \
                               context().c_str());                                                       \
  } while (0)

// ---- a rank's state for one library -------------------------------------------------------------

struct Ctx {
  int lib = 0, rank = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  char *send = nullptr, *recv = nullptr;
  size_t cap = 0;  // bytes of each buffer
  ncclWindow_t wsend = nullptr, wrecv = nullptr;
  void* dscalar = nullptr;  // PreMulSum scalar in device memory
  ncclRedOp_t op = ncclSum;
  cudaGraphExec_t exec = nullptr;
  ncclResult_t rc = ncclSuccess;  // of the latest enqueue
  std::string rc_text;
};

/// What a driver (a process or thread, or the one thread of the single layout) runs: its ranks.
struct Driver {
  std::vector<int> ranks;
  int drivers = 1;  // how many drivers meet at barriers
  int slot = 0;     // watchdog slot
  std::map<int, Ctx> ctx[kMaxLibs];
  bool leader() const { return ranks[0] == 0; }
};

size_t buffer_bytes() {
  size_t maxc = 0;
  for (size_t c : opt.counts) maxc = std::max(maxc, c);
  for (size_t c : opt.big_counts) maxc = std::max(maxc, c);
  size_t bytes = 2 * (size_t)nranks * maxc * 8 + 4096;  // in-place Send/Recv: 2 x nranks blocks of 8 bytes
  size_t gran = 1 << 21;
  return (bytes + gran - 1) / gran * gran;
}

ncclConfig_t make_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (opt.hints) {  // the hints NCCL 2.28 clients set; NCCL treats each as a hint
    cfg.blocking = 1;
    cfg.cgaClusterSize = 4;
    cfg.minCTAs = 1;
    cfg.maxCTAs = 32;
    cfg.netName = "Socket";
    cfg.splitShare = 1;
    cfg.trafficClass = 0;
    cfg.commName = "conformance";
    cfg.collnetEnable = 0;
    cfg.CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
    cfg.shrinkShare = 0;
    cfg.nChannelsPerNetPeer = 2;
    cfg.nvlinkCentricSched = 1;
  }
  return cfg;
}
const char* kHintText =
    "blocking=1 cgaClusterSize=4 minCTAs=1 maxCTAs=32 netName=Socket splitShare=1 trafficClass=0 commName "
    "collnetEnable=0 CTAPolicy=0 shrinkShare=0 nChannelsPerNetPeer=2 nvlinkCentricSched=1";

// ---- reporting: per-rank verdicts, gathered by the leader -------------------------------------------

/// After the leader saw a setup step fail everywhere: the leader prints the tally and ends the run;
/// every other driver ends quietly (a forked rank) or waits for the leader's exit (a thread).
void stop_if_failed(bool leader) {
  if (shared->ids_ready.load() >= 0) return;
  if (leader) die(1, "%d passed, %d failed", shared->passed.load(), shared->failed.load());
  if (opt.layout == "processes") _exit(1);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void put_slot(int rank, int status, const std::string& msg) {
  shared->slots[rank].status = status;
  std::snprintf(shared->slots[rank].msg, sizeof shared->slots[rank].msg, "%s", msg.c_str());
}

/// Per check group (collected by the leader over the group's cases).
struct GroupResult {
  int worst = 0;
  std::string first_fail, first_note;
  void absorb() {
    for (int r = 0; r < nranks; r++) {
      const Slot& s = shared->slots[r];
      if (s.status == 2 && first_fail.empty()) first_fail = s.msg;
      if (s.status == 1 && first_note.empty()) first_note = s.msg;
      worst = std::max(worst, s.status);
    }
  }
  void print(const std::string& name) {
    if (worst == 2) {
      shared->failed++;
      std::printf("FAIL %s %s: %s\n", name.c_str(), context().c_str(), first_fail.c_str());
    } else {
      shared->passed++;
      std::printf("ok   %s%s%s\n", name.c_str(), first_note.empty() ? "" : "  (note: ", first_note.empty() ? "" : (first_note + ")").c_str());
    }
    std::fflush(stdout);
  }
};

// ---- initialisation and teardown ------------------------------------------------------------------

void init_comms(Driver& d) {
  ncclConfig_t cfg = make_config();
  for (int l : active) {
    Lib& L = libs[l];
    for (int r : d.ranks) {
      Ctx& c = d.ctx[l][r];
      c.lib = l;
      c.rank = r;
      CUDA(cudaSetDevice(r));
      CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    }
    watch(d.slot, opt.timeout * 2, std::string(L.tag) + ": communicator initialisation");
    ncclResult_t rc = ncclSuccess;
    std::string how;
    if (opt.layout == "single" && opt.init == "all") {
      std::vector<ncclComm_t> comms(nranks);
      std::vector<int> devs(nranks);
      for (int r = 0; r < nranks; r++) devs[r] = r;
      rc = L.CommInitAll(comms.data(), nranks, devs.data());
      for (int r = 0; r < nranks; r++) d.ctx[l][r].comm = comms[r];
      how = "ncclCommInitAll";
    } else {
      bool grouped = d.ranks.size() > 1;
      if (grouped) L.GroupStart();
      for (int r : d.ranks) {
        CUDA(cudaSetDevice(r));
        ncclResult_t one = L.CommInitRankConfig(&d.ctx[l][r].comm, nranks, shared->ids[l], r, &cfg);
        if (one != ncclSuccess && rc == ncclSuccess) rc = one;
      }
      if (grouped) {
        ncclResult_t end = L.GroupEnd();
        if (rc == ncclSuccess) rc = end;
      }
      how = std::string(grouped ? "ncclGroupStart + ncclCommInitRankConfig per GPU + ncclGroupEnd" : "ncclCommInitRankConfig") +
            (opt.hints ? std::string(" with the NCCL 2.28 hints ") + kHintText : " without hints");
    }
    unwatch(d.slot);
    for (int r : d.ranks) {
      put_slot(r, rc == ncclSuccess ? 0 : 2,
               rc == ncclSuccess ? "" : std::string(L.tag) + " rank " + std::to_string(r) + ": " + L.err(rc, d.ctx[l][r].comm));
    }
    barrier(d.drivers, "init", d.slot);
    if (d.leader()) {
      GroupResult g;
      g.absorb();
      g.print(std::string("init ") + L.tag + ": " + how);
      if (g.worst == 2) shared->ids_ready = -1;  // tells every driver to stop
    }
    barrier(d.drivers, "init report", d.slot);
    stop_if_failed(d.leader());
  }
  // Buffers: plain cudaMalloc, or ncclMemAlloc registered as symmetric windows (collective).
  size_t cap = buffer_bytes();
  for (int l : active) {
    Lib& L = libs[l];
    ncclResult_t rc = ncclSuccess;
    watch(d.slot, opt.timeout, std::string(L.tag) + ": buffers" + (opt.windows ? " (ncclMemAlloc + ncclCommWindowRegister)" : ""));
    for (int r : d.ranks) {
      Ctx& c = d.ctx[l][r];
      CUDA(cudaSetDevice(r));
      c.cap = cap;
      CUDA(cudaMalloc(&c.dscalar, 64));
      if (opt.windows) {
        ncclResult_t a = L.MemAlloc((void**)&c.send, cap), b = L.MemAlloc((void**)&c.recv, cap);
        if (rc == ncclSuccess) rc = a != ncclSuccess ? a : b;
      } else {
        CUDA(cudaMalloc(&c.send, cap));
        CUDA(cudaMalloc(&c.recv, cap));
      }
    }
    if (opt.windows && rc == ncclSuccess) {
      bool grouped = d.ranks.size() > 1;
      if (grouped) L.GroupStart();
      for (int r : d.ranks) {
        Ctx& c = d.ctx[l][r];
        CUDA(cudaSetDevice(r));
        ncclResult_t a = L.CommWindowRegister(c.comm, c.send, cap, &c.wsend, NCCL_WIN_COLL_SYMMETRIC);
        ncclResult_t b = L.CommWindowRegister(c.comm, c.recv, cap, &c.wrecv, NCCL_WIN_COLL_SYMMETRIC);
        if (rc == ncclSuccess) rc = a != ncclSuccess ? a : b;
      }
      if (grouped) {
        ncclResult_t end = L.GroupEnd();
        if (rc == ncclSuccess) rc = end;
      }
    }
    unwatch(d.slot);
    if (opt.windows) {
      for (int r : d.ranks) put_slot(r, rc == ncclSuccess ? 0 : 2, rc == ncclSuccess ? "" : std::string(L.tag) + " rank " + std::to_string(r) + ": " + L.err(rc, d.ctx[l][r].comm));
      barrier(d.drivers, "windows", d.slot);
      if (d.leader()) {
        GroupResult g;
        g.absorb();
        g.print(std::string("windows ") + L.tag + ": ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) of send and receive buffers");
        if (g.worst == 2) shared->ids_ready = -1;
      }
      barrier(d.drivers, "windows report", d.slot);
      stop_if_failed(d.leader());
    }
  }
}

void teardown(Driver& d) {
  for (int l : active) {
    Lib& L = libs[l];
    watch(d.slot, opt.timeout, std::string(L.tag) + ": teardown");
    ncclResult_t rc = ncclSuccess;
    auto keep = [&](ncclResult_t x) { if (rc == ncclSuccess) rc = x; };
    bool grouped = d.ranks.size() > 1;
    if (opt.windows) {
      if (grouped) L.GroupStart();
      for (int r : d.ranks) {
        CUDA(cudaSetDevice(r));
        keep(L.CommWindowDeregister(d.ctx[l][r].comm, d.ctx[l][r].wsend));
        keep(L.CommWindowDeregister(d.ctx[l][r].comm, d.ctx[l][r].wrecv));
      }
      if (grouped) keep(L.GroupEnd());
    }
    for (int r : d.ranks) {
      Ctx& c = d.ctx[l][r];
      CUDA(cudaSetDevice(r));
      if (opt.windows) {
        keep(L.MemFree(c.send));
        keep(L.MemFree(c.recv));
      } else {
        CUDA(cudaFree(c.send));
        CUDA(cudaFree(c.recv));
      }
      CUDA(cudaFree(c.dscalar));
    }
    if (grouped) L.GroupStart();
    for (int r : d.ranks) {
      CUDA(cudaSetDevice(r));
      keep(L.CommFinalize(d.ctx[l][r].comm));
    }
    if (grouped) keep(L.GroupEnd());
    for (int r : d.ranks) {
      CUDA(cudaSetDevice(r));
      keep(L.CommDestroy(d.ctx[l][r].comm));
      CUDA(cudaStreamDestroy(d.ctx[l][r].stream));
    }
    unwatch(d.slot);
    for (int r : d.ranks) put_slot(r, rc == ncclSuccess ? 0 : 2, rc == ncclSuccess ? "" : std::string(L.tag) + " rank " + std::to_string(r) + ": " + L.err(rc, nullptr));
    barrier(d.drivers, "teardown", d.slot);
    if (d.leader()) {
      GroupResult g;
      g.absorb();
      g.print(std::string("teardown ") + L.tag + (opt.windows ? ": ncclCommWindowDeregister, ncclMemFree, " : ": ") +
              "ncclCommFinalize, ncclCommDestroy");
    }
    barrier(d.drivers, "teardown report", d.slot);
  }
}

// ---- one collective call ------------------------------------------------------------------------

/// Issues rank r's call of case c through its library (stream-ordered; no wait).
ncclResult_t issue(const Lib& L, Ctx& x, const Case& c, const Placement& pl) {
  size_t es = dtype_size(c.dtype);
  const char* sp = pl.send_in_region ? x.recv + pl.send_off * es : x.send + pl.send_off * es;
  char* rp = x.recv + pl.recv_off * es;
  auto dt = (ncclDataType_t)c.dtype;
  size_t k = c.count;
  switch (c.coll) {
    case kAllReduce: return L.AllReduce(sp, rp, k, dt, x.op, x.comm, x.stream);
    case kAllGather: return L.AllGather(sp, rp, k, dt, x.comm, x.stream);
    case kReduceScatter: return L.ReduceScatter(sp, rp, k, dt, x.op, x.comm, x.stream);
    case kBroadcast: return L.Broadcast(sp, rp, k, dt, c.root, x.comm, x.stream);
    case kReduce: return L.Reduce(sp, rp, k, dt, x.op, c.root, x.comm, x.stream);
    case kAlltoAll: return L.AlltoAll(sp, rp, k, dt, x.comm, x.stream);
    case kGather: return L.Gather(sp, rp, k, dt, c.root, x.comm, x.stream);
    case kScatter: return L.Scatter(sp, rp, k, dt, c.root, x.comm, x.stream);
    default: {  // every pair of ranks exchanges a block, self included, in one group
      ncclResult_t rc = L.GroupStart();
      for (int q = 0; q < c.nranks && rc == ncclSuccess; q++) {
        rc = L.Send(sp + q * k * es, k, dt, q, x.comm, x.stream);
        if (rc == ncclSuccess) rc = L.Recv(rp + q * k * es, k, dt, q, x.comm, x.stream);
      }
      ncclResult_t end = L.GroupEnd();
      return rc != ncclSuccess ? rc : end;
    }
  }
}

/// Every rank of the driver issues its call (inside a group when the driver has several ranks).
void enqueue(Driver& d, int l, const Case& c, const std::map<int, RankPlan>& plans) {
  Lib& L = libs[l];
  bool grouped = d.ranks.size() > 1;
  if (grouped) L.GroupStart();
  for (int r : d.ranks) {
    CUDA(cudaSetDevice(r));
    Ctx& x = d.ctx[l][r];
    x.rc = issue(L, x, c, plans.at(r).place);
    x.rc_text = x.rc == ncclSuccess ? "" : L.err(x.rc, x.comm);
  }
  if (grouped) {
    ncclResult_t end = L.GroupEnd();
    for (int r : d.ranks) {
      Ctx& x = d.ctx[l][r];
      if (end != ncclSuccess && x.rc == ncclSuccess) {
        x.rc = end;
        x.rc_text = "at ncclGroupEnd: " + L.err(end, x.comm);
      }
    }
  }
}

cudaStreamCaptureMode capture_mode() {
  if (opt.capture == "global") return cudaStreamCaptureModeGlobal;
  if (opt.capture == "relaxed") return cudaStreamCaptureModeRelaxed;
  return cudaStreamCaptureModeThreadLocal;
}

/// Captures the driver's calls into one graph per rank (all captures open at once, as a single
/// thread driving several GPUs must).
void capture(Driver& d, int l, const Case& c, const std::map<int, RankPlan>& plans) {
  for (int r : d.ranks) {
    CUDA(cudaSetDevice(r));
    CUDA(cudaStreamBeginCapture(d.ctx[l][r].stream, capture_mode()));
  }
  enqueue(d, l, c, plans);
  for (int r : d.ranks) {
    Ctx& x = d.ctx[l][r];
    CUDA(cudaSetDevice(r));
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(x.stream, &graph);
    if (e != cudaSuccess && x.rc == ncclSuccess) {
      x.rc = ncclUnhandledCudaError;
      x.rc_text = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
    }
    if (graph) {
      if (x.rc == ncclSuccess) {
        e = cudaGraphInstantiate(&x.exec, graph, 0);
        if (e != cudaSuccess) {
          x.rc = ncclUnhandledCudaError;
          x.rc_text = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
          x.exec = nullptr;
        }
      }
      CUDA(cudaGraphDestroy(graph));
    }
  }
}

std::string case_name(const Case& c) {
  std::string s = std::string(coll_name(c.coll)) + " " + dtype_name(c.dtype);
  if (coll_reduces(c.coll)) s += std::string(" ") + op_name(c.op);
  return s + (c.in_place ? " in place" : " out of place");
}

/// PreMulSum's scalar: kept on the host (ncclScalarHostImmediate) or read from device memory.
enum Residence { kNoScalar, kHostScalar, kDeviceScalar };

/// Inputs of every rank and their PreMulSum scalars for one replay.
struct Inputs {
  std::vector<std::vector<uint8_t>> data;
  std::vector<uint64_t> scalars;
};

Inputs make_inputs(const Case& c, uint64_t key, int replay, Residence res) {
  Inputs in;
  in.data.resize(c.nranks);
  in.scalars.resize(c.nranks);
  for (int r = 0; r < c.nranks; r++) {
    in.data[r] = random_input(c.dtype, c.op, input_elems(c, r), mix(mix(key, replay), r));
    // A host scalar is read once, when the operator is made; a device scalar on every replay.
    in.scalars[r] = random_scalar(c.dtype, mix(mix(key, res == kDeviceScalar ? replay : 0), 1000 + r));
  }
  return in;
}

/// Runs one case through every loaded library (eager: once; graph: captured once, replayed
/// opt.replays times with fresh inputs) and records each rank's verdict in its slot.
void run_case(Driver& d, const Case& c, Residence res, uint64_t key) {
  std::string where = case_name(c) + (res == kHostScalar ? " (host scalar)" : res == kDeviceScalar ? " (device scalar)" : "") +
                      " count " + std::to_string(c.count) + (coll_has_root(c.coll) ? " root " + std::to_string(c.root) : "");
  bool graph = opt.mode == "graph";
  int replays = graph ? opt.replays : 1;
  std::map<int, int> status;       // per rank: worst status so far
  std::map<int, std::string> msg;  // per rank: first failure (or note)
  for (int r : d.ranks) status[r] = 0;
  auto verdict = [&](int r, int s, const std::string& m) {
    if (s > status[r]) {
      status[r] = s;
      msg[r] = m;
    } else if (s == status[r] && s > 0 && msg[r].empty()) {
      msg[r] = m;
    }
  };
  // PreMulSum operators (one per rank and library) and, in graph mode, the captured graphs.
  for (int l : active) {
    for (int r : d.ranks) {
      Ctx& x = d.ctx[l][r];
      x.op = (ncclRedOp_t)(c.op == kPreMulSum ? kSum : c.op);
      x.exec = nullptr;
      x.rc = ncclSuccess;
      x.rc_text.clear();
    }
  }
  std::vector<Inputs> per_replay;
  for (int rep = 0; rep < replays; rep++) per_replay.push_back(make_inputs(c, key, rep, res));
  std::map<int, std::map<int, std::vector<uint8_t>>> got;  // [lib][rank]
  for (int rep = 0; rep < replays; rep++) {
    const Inputs& in = per_replay[rep];
    std::map<int, RankPlan> plans;
    for (int r : d.ranks) plans[r] = plan_rank(c, r, in.data, in.scalars, mix(key, 77 + r));
    for (int l : active) {
      Lib& L = libs[l];
      std::string step = std::string(L.tag) + " " + where + (graph ? " replay " + std::to_string(rep) : "");
      watch(d.slot, opt.timeout, step);
      // Inputs and poison, then the scalar and the operator. On the rank's own stream, then
      // waited for: a cudaMemcpy from pageable memory may return before its last DMA has
      // landed, and nothing orders that legacy-stream DMA before work on a non-blocking stream
      // (a replay launched right after would read the previous replay's bytes at the end of the
      // buffer). Every rank's buffers are final before the barrier lets any rank launch.
      for (int r : d.ranks) {
        Ctx& x = d.ctx[l][r];
        const RankPlan& p = plans[r];
        CUDA(cudaSetDevice(r));
        if (!p.send_init.empty())
          CUDA(cudaMemcpyAsync(x.send, p.send_init.data(), p.send_init.size(), cudaMemcpyHostToDevice, x.stream));
        CUDA(cudaMemcpyAsync(x.recv, p.region_init.data(), p.region_init.size(), cudaMemcpyHostToDevice, x.stream));
        if (c.op == kPreMulSum) CUDA(cudaMemcpyAsync(x.dscalar, &in.scalars[r], 8, cudaMemcpyHostToDevice, x.stream));
        CUDA(cudaStreamSynchronize(x.stream));
        if (c.op == kPreMulSum) {
          if (rep == 0) {
            uint64_t host = in.scalars[r];
            x.rc = L.RedOpCreatePreMulSum(&x.op, res == kHostScalar ? (void*)&host : x.dscalar, (ncclDataType_t)c.dtype,
                                          res == kHostScalar ? ncclScalarHostImmediate : ncclScalarDevice, x.comm);
            if (x.rc != ncclSuccess) x.rc_text = "ncclRedOpCreatePreMulSum: " + L.err(x.rc, x.comm);
          }
        }
      }
      barrier(d.drivers, "inputs", d.slot);
      bool made = true;
      for (int r : d.ranks) made &= d.ctx[l][r].rc == ncclSuccess;
      if (made) {
        if (!graph) {
          enqueue(d, l, c, plans);
        } else {
          if (rep == 0) capture(d, l, c, plans);
          for (int r : d.ranks) {
            Ctx& x = d.ctx[l][r];
            if (x.rc == ncclSuccess && x.exec) {
              CUDA(cudaSetDevice(r));
              CUDA(cudaGraphLaunch(x.exec, x.stream));
            }
          }
        }
      }
      for (int r : d.ranks) {
        CUDA(cudaSetDevice(r));
        CUDA(cudaStreamSynchronize(d.ctx[l][r].stream));
      }
      for (int r : d.ranks) {
        Ctx& x = d.ctx[l][r];
        std::vector<uint8_t>& g = got[l][r];
        g.resize(plans[r].region_init.size());
        CUDA(cudaSetDevice(r));
        CUDA(cudaMemcpy(g.data(), x.recv, g.size(), cudaMemcpyDeviceToHost));
      }
      barrier(d.drivers, "run", d.slot);
      unwatch(d.slot);
    }
    // Verdicts: weft (or the only library) against the reference and against the real NCCL.
    for (int r : d.ranks) {
      const RankPlan& p = plans[r];
      std::string at = where + (graph ? " replay " + std::to_string(rep) : "") + " rank " + std::to_string(r);
      int subject = active.back();
      bool compare = active.size() == 2;
      Ctx& s = d.ctx[subject][r];
      Mismatch ms = s.rc == ncclSuccess ? check_region(p.expect, got[subject][r].data(), p.region_init.data(),
                                                       compare ? got[0][r].data() : nullptr, "nccl")
                                        : Mismatch{};
      if (!compare) {
        if (s.rc != ncclSuccess) {
          // With only the real NCCL loaded, a refusal is NCCL's behaviour, not a failure.
          verdict(r, subject == 0 ? 1 : 2, std::string(libs[subject].tag) + " refused " + at + ": " + s.rc_text);
        } else if (ms.wrong && subject == 0 && c.coll == kAlltoAll && c.in_place) {
          // NCCL 2.28 accepts sendbuff == recvbuff for AlltoAll but its peers' writes race with
          // its own reads (seen on a 2-GPU machine: thousands of elements never written).
          verdict(r, 1, "nccl's in-place AlltoAll is not correct (its writes race its reads) " + at + ": " + ms.what);
        } else if (ms.wrong) {
          verdict(r, 2, std::string(libs[subject].tag) + " " + at + ": " + ms.what);
        }
        continue;
      }
      Ctx& n = d.ctx[0][r];
      Mismatch mn = n.rc == ncclSuccess ? check_region(p.expect, got[0][r].data(), p.region_init.data()) : Mismatch{};
      if (n.rc != ncclSuccess) {
        if (s.rc == n.rc && (n.rc == ncclInvalidArgument || n.rc == ncclInvalidUsage)) {
          verdict(r, 1, "both refuse " + at + " with code " + std::to_string((int)n.rc));
        } else if (s.rc == n.rc) {
          // Both failing alike with a CUDA or system error is the harness's or the machine's
          // fault, never a verdict on weft: it must not pass unseen.
          verdict(r, 2, "both failed " + at + " (not a refusal): nccl: " + n.rc_text + "; weft: " + s.rc_text);
        } else if (s.rc != ncclSuccess) {
          verdict(r, 2, "weft " + at + " returned " + s.rc_text + ", nccl " + n.rc_text);
        } else if (ms.wrong) {
          verdict(r, 2, "weft " + at + ": " + ms.what + " (nccl refuses it: " + n.rc_text + ")");
        } else {
          verdict(r, 1, "nccl refuses " + at + " (" + n.rc_text + "); weft runs it correctly");
        }
        continue;
      }
      if (s.rc != ncclSuccess) {
        verdict(r, 2, "weft refused " + at + ": " + s.rc_text + "; nccl ran it");
        continue;
      }
      if (!ms.wrong) {
        if (mn.wrong) verdict(r, 1, "nccl differs from the host reference " + at + ": " + mn.what);
        continue;
      }
      size_t first = 0;
      if (outputs_agree(p.expect, got[subject][r].data(), got[0][r].data(), &first)) {
        verdict(r, 1, "weft and nccl agree but both differ from the host reference (check the reference) " + at + ": " + ms.what);
      } else {
        verdict(r, 2, "weft " + at + ": " + ms.what + (mn.wrong ? " (nccl also differs from the reference: " + mn.what + ")" : " (nccl matches the reference)"));
      }
    }
  }
  // Release graphs and operators.
  for (int l : active) {
    for (int r : d.ranks) {
      Ctx& x = d.ctx[l][r];
      CUDA(cudaSetDevice(r));
      if (x.exec) CUDA(cudaGraphExecDestroy(x.exec));
      x.exec = nullptr;
      if (c.op == kPreMulSum && x.op >= ncclNumOps) {
        ncclResult_t rc = libs[l].RedOpDestroy(x.op, x.comm);
        if (rc != ncclSuccess) verdict(r, 2, std::string(libs[l].tag) + " ncclRedOpDestroy after " + where + ": " + libs[l].err(rc, x.comm));
      }
    }
  }
  for (int r : d.ranks) {
    if (status[r] > shared->slots[r].status || (status[r] > 0 && !shared->slots[r].msg[0])) put_slot(r, status[r], msg[r]);
  }
}

// ---- the data checks ------------------------------------------------------------------------------

std::vector<size_t> counts_for(int coll, int dtype) {
  std::vector<size_t> out = opt.counts;
  bool big = (coll == kAllReduce || coll == kAllGather) && (dtype == kFloat || dtype == kInt8 || dtype == kBfloat16);
  if (big) out.insert(out.end(), opt.big_counts.begin(), opt.big_counts.end());
  return out;
}

void run_data_checks(Driver& d) {
  for (int coll : opt.colls) {
    for (int dt : opt.types) {
      if (dt >= (int)ncclNumTypes) continue;
      std::vector<std::pair<int, Residence>> ops;
      if (coll_reduces(coll)) {
        for (int op : opt.ops) {
          if (op == kPreMulSum) {
            ops.push_back({op, kHostScalar});
            ops.push_back({op, kDeviceScalar});
          } else {
            ops.push_back({op, kNoScalar});
          }
        }
      } else {
        ops.push_back({kSum, kNoScalar});
      }
      for (auto [op, res] : ops) {
        for (bool in_place : {false, true}) {
          for (int r : d.ranks) put_slot(r, 0, "");
          barrier(d.drivers, "group start", d.slot);
          std::vector<size_t> counts = counts_for(coll, dt);
          for (size_t i = 0; i < counts.size(); i++) {
            Case c{coll, dt, op, counts[i], in_place, coll_has_root(coll) ? (int)(i % nranks) : 0, nranks};
            uint64_t key = mix(mix(mix(opt.seed, coll), mix(dt, op * 4 + res)), mix(counts[i], in_place));
            run_case(d, c, res, key);
          }
          barrier(d.drivers, "group end", d.slot);
          if (d.leader()) {
            Case c{coll, dt, op, 0, in_place, 0, nranks};
            std::string name = case_name(c) + (res == kHostScalar ? " (host scalar)" : res == kDeviceScalar ? " (device scalar)" : "");
            std::string cs;
            for (size_t k : counts) cs += (cs.empty() ? "" : ",") + std::to_string(k);
            GroupResult g;
            g.absorb();
            g.print(name + ": counts " + cs + " x " + std::to_string(nranks) + " ranks" +
                    (opt.mode == "graph" ? " x " + std::to_string(opt.replays) + " replays" : ""));
          }
          barrier(d.drivers, "group report", d.slot);
        }
      }
    }
  }
}

// ---- API checks: bad arguments, error codes, ncclGetLastError ------------------------------------------

struct ApiCheck {
  const char* name;
  bool nccl_too;  // false: the real NCCL does not check this (it would run the call); weft must refuse it
  std::function<ncclResult_t(const Lib&, Ctx&)> call;
};

std::vector<ApiCheck> api_checks() {
  auto bad_type = (ncclDataType_t)ncclNumTypes;
  auto bad_op = (ncclRedOp_t)ncclNumOps;  // no user operator was created with this number
  return {
      {"AllReduce with a null sendbuff", true, [](const Lib& L, Ctx& x) { return L.AllReduce(nullptr, x.recv, 7, ncclFloat, ncclSum, x.comm, x.stream); }},
      {"AllReduce with a null recvbuff", true, [](const Lib& L, Ctx& x) { return L.AllReduce(x.send, nullptr, 7, ncclFloat, ncclSum, x.comm, x.stream); }},
      {"AllReduce with datatype ncclNumTypes", true, [=](const Lib& L, Ctx& x) { return L.AllReduce(x.send, x.recv, 7, bad_type, ncclSum, x.comm, x.stream); }},
      {"AllReduce with datatype -1", true, [](const Lib& L, Ctx& x) { return L.AllReduce(x.send, x.recv, 7, (ncclDataType_t)-1, ncclSum, x.comm, x.stream); }},
      {"AllReduce with op ncclNumOps (never created)", true, [=](const Lib& L, Ctx& x) { return L.AllReduce(x.send, x.recv, 7, ncclFloat, bad_op, x.comm, x.stream); }},
      {"AllReduce with op -1", true, [](const Lib& L, Ctx& x) { return L.AllReduce(x.send, x.recv, 7, ncclFloat, (ncclRedOp_t)-1, x.comm, x.stream); }},
      {"Broadcast with root nranks", true, [](const Lib& L, Ctx& x) { return L.Broadcast(x.send, x.recv, 7, ncclFloat, nranks, x.comm, x.stream); }},
      {"Reduce with root -1", true, [](const Lib& L, Ctx& x) { return L.Reduce(x.send, x.recv, 7, ncclFloat, ncclSum, -1, x.comm, x.stream); }},
      {"Send to peer nranks", true, [](const Lib& L, Ctx& x) { return L.Send(x.send, 7, ncclFloat, nranks, x.comm, x.stream); }},
      {"Recv from peer -1", true, [](const Lib& L, Ctx& x) { return L.Recv(x.recv, 7, ncclFloat, -1, x.comm, x.stream); }},
      {"ncclRedOpDestroy of a built-in operator", true, [](const Lib& L, Ctx& x) { return L.RedOpDestroy(ncclSum, x.comm); }},
      {"AllReduce with a bad datatype inside a group (code of the call x 16 + code of ncclGroupEnd)", true,
       [=](const Lib& L, Ctx& x) {
         L.GroupStart();
         ncclResult_t a = L.AllReduce(x.send, x.recv, 7, bad_type, ncclSum, x.comm, x.stream);
         ncclResult_t b = L.GroupEnd();
         return (ncclResult_t)(a * 16 + b);  // both codes, compared together
       }},
      {"AllReduce with a null communicator", true, [](const Lib& L, Ctx& x) { return L.AllReduce(x.send, x.recv, 7, ncclFloat, ncclSum, nullptr, x.stream); }},
      {"AllGather whose sendcount x nranks overflows size_t", false,
       [](const Lib& L, Ctx& x) { return L.AllGather(x.send, x.recv, SIZE_MAX / 2 + 1, ncclInt8, x.comm, x.stream); }},
      {"AllReduce whose count x 8 bytes overflows size_t", false,
       [](const Lib& L, Ctx& x) { return L.AllReduce(x.send, x.recv, SIZE_MAX / 4, ncclFloat64, ncclSum, x.comm, x.stream); }},
  };
}

void run_api_checks(Driver& d) {
  for (const ApiCheck& chk : api_checks()) {
    if (!chk.nccl_too && !libs[1].handle) continue;  // weft-only checks need weft
    for (int r : d.ranks) put_slot(r, 0, "");
    barrier(d.drivers, "api start", d.slot);
    for (int r : d.ranks) {
      CUDA(cudaSetDevice(r));
      ncclResult_t rc[kMaxLibs] = {ncclSuccess, ncclSuccess};
      std::string text[kMaxLibs];
      int status = 0;
      std::string msg;
      for (int l : active) {
        if (l == 0 && !chk.nccl_too) continue;
        watch(d.slot, opt.timeout, std::string(libs[l].tag) + " " + chk.name);
        Ctx& x = d.ctx[l][r];
        rc[l] = chk.call(libs[l], x);
        const char* with_comm = libs[l].GetLastError(x.comm);
        const char* with_null = libs[l].GetLastError(nullptr);
        unwatch(d.slot);
        text[l] = with_comm ? with_comm : "";
        bool empty = !with_comm || !*with_comm || !with_null || !*with_null;
        if (rc[l] == ncclSuccess && l == 1 && !(chk.nccl_too && active.size() == 2 && rc[0] == ncclSuccess)) {
          status = 2;
          msg = std::string("weft accepted it (rank ") + std::to_string(r) + ")";
        } else if (empty && l == active.back()) {
          status = 2;
          msg = std::string(libs[l].tag) + " rank " + std::to_string(r) + ": ncclGetLastError(" +
                (!with_comm || !*with_comm ? "comm" : "NULL") + ") is empty after the failure";
        }
      }
      if (status == 0 && active.size() == 2 && chk.nccl_too && rc[0] != rc[1]) {
        status = 2;
        msg = "rank " + std::to_string(r) + ": weft returned " + std::to_string((int)rc[1]) + ", nccl " + std::to_string((int)rc[0]) +
              " (last error: weft '" + text[1] + "', nccl '" + text[0] + "')";
      }
      if (status == 0 && !chk.nccl_too && active.back() == 1 && rc[1] != ncclInvalidArgument) {
        status = 2;
        msg = "weft returned " + std::to_string((int)rc[1]) + ", want ncclInvalidArgument (4)";
      }
      if (status == 0) msg = "code " + std::to_string((int)rc[active.back()]) + ", '" + text[active.back()].substr(0, 100) + "'";
      put_slot(r, status == 2 ? 2 : 1, msg);
    }
    barrier(d.drivers, "api", d.slot);
    if (d.leader()) {
      GroupResult g;
      g.absorb();
      if (g.worst == 1) g.worst = 0;  // the note is the error text, shown as information
      g.print(std::string("error: ") + chk.name + (chk.nccl_too ? "" : " (weft only: the real NCCL does not check it)"));
    }
    barrier(d.drivers, "api report", d.slot);
  }
  // An unknown `blocking` value: refused by NCCL and weft alike (a one-rank communicator).
  if (d.leader()) {
    ncclResult_t rc[kMaxLibs] = {ncclSuccess, ncclSuccess};
    std::string text[kMaxLibs];
    CUDA(cudaSetDevice(d.ranks[0]));
    for (int l : active) {
      watch(d.slot, opt.timeout, std::string(libs[l].tag) + " ncclCommInitRankConfig with blocking = 2");
      ncclUniqueId id;
      libs[l].GetUniqueId(&id);
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 2;
      ncclComm_t comm = nullptr;
      rc[l] = libs[l].CommInitRankConfig(&comm, 1, id, 0, &cfg);
      const char* t = libs[l].GetLastError(nullptr);
      text[l] = t ? t : "";
      if (rc[l] == ncclSuccess && comm) libs[l].CommDestroy(comm);
      unwatch(d.slot);
    }
    int s = active.back();
    bool ok = rc[s] != ncclSuccess && !text[s].empty() && (active.size() == 1 || rc[0] == rc[1]);
    put_slot(0, ok ? 0 : 2, std::string(libs[s].tag) + " returned " + std::to_string((int)rc[s]) +
                                (active.size() == 2 ? ", nccl " + std::to_string((int)rc[0]) : "") + ", last error '" + text[s] + "'");
    for (int r = 1; r < nranks; r++) put_slot(r, 0, "");
    GroupResult g;
    g.absorb();
    g.print("error: ncclCommInitRankConfig with an unknown blocking value (2)");
  }
  barrier(d.drivers, "config check", d.slot);
}

// ---- drivers per layout ---------------------------------------------------------------------------

void drive(Driver& d) {
  init_comms(d);
  run_data_checks(d);
  if (opt.api && opt.mode == "eager") run_api_checks(d);
  teardown(d);
}

void make_ids() {
  for (int l : active) {
    ncclResult_t rc = libs[l].GetUniqueId(&shared->ids[l]);
    if (rc != ncclSuccess) die(2, "%s: ncclGetUniqueId failed: %s", libs[l].tag, libs[l].err(rc, nullptr).c_str());
  }
  shared->ids_ready = 1;
}

void wait_ids(int slot) {
  int64_t deadline = now_ms() + (int64_t)(opt.timeout * 1000);
  while (shared->ids_ready.load() == 0) {
    if (now_ms() > deadline) die(3, "HANG %s: rank %d waited %.0f s for the unique ids from rank 0", context().c_str(), slot, opt.timeout);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int run_processes() {
  std::vector<pid_t> kids;
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid < 0) die(2, "fork failed");
    if (pid == 0) {
      start_watchdog();
      if (r == 0) make_ids();
      else wait_ids(r);
      Driver d;
      d.ranks = {r};
      d.drivers = nranks;
      d.slot = 0;
      drive(d);
      std::fflush(stdout);
      _exit(0);
    }
    kids.push_back(pid);
  }
  // Every child is bounded by its own watchdog and barriers; this bounds the whole.
  int64_t deadline = now_ms() + (int64_t)(opt.total_timeout * 1000);
  int bad = 0;
  for (size_t i = 0; i < kids.size(); i++) {
    int st = 0;
    for (;;) {
      pid_t w = waitpid(kids[i], &st, WNOHANG);
      if (w == kids[i]) break;
      if (now_ms() > deadline) {
        for (pid_t k : kids) kill(k, SIGKILL);
        die(3, "HANG %s: rank %zu's process did not exit", context().c_str(), i);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::printf("FAIL rank %zu's process %s %d %s\n", i, WIFEXITED(st) ? "exited with" : "was killed by signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), context().c_str());
      bad++;
    }
  }
  return bad;
}

int run_threads() {
  start_watchdog();
  make_ids();
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; r++) {
    ts.emplace_back([r] {
      Driver d;
      d.ranks = {r};
      d.drivers = nranks;
      d.slot = r;
      drive(d);
    });
  }
  for (auto& t : ts) t.join();
  return 0;
}

int run_single() {
  start_watchdog();
  make_ids();
  Driver d;
  for (int r = 0; r < nranks; r++) d.ranks.push_back(r);
  d.drivers = 1;
  d.slot = 0;
  drive(d);
  return 0;
}

// ---- command line ---------------------------------------------------------------------------------

template <typename F>
std::vector<int> parse_names(const std::string& list, int n, F name) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    std::string item = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    int found = -1;
    for (int i = 0; i < n; i++) {
      std::string nm = name(i);
      for (auto& ch : nm) ch = (char)tolower(ch);
      std::string it = item;
      for (auto& ch : it) ch = (char)tolower(ch);
      if (nm == it) found = i;
    }
    if (found < 0) die(2, "unknown name '%s'", item.c_str());
    out.push_back(found);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

std::vector<size_t> parse_counts(const std::string& s) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    out.push_back(std::stoull(s.substr(pos)));
    size_t end = s.find(',', pos);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

void usage() {
  std::printf(
      "usage: conformance --weft LIB --nccl LIB [--layout processes|threads|single] [--init group|all]\n"
      "  [--mode eager|graph] [--windows] [--quick] [--counts 1,7,...] [--colls AllReduce,...]\n"
      "  [--types int8,...] [--ops sum,...,premulsum] [--gpus N] [--seed S] [--timeout SECONDS]\n"
      "  [--total-timeout SECONDS]\n"
      "  [--replays R] [--capture thread|global|relaxed] [--no-hints] [--no-api] [--allow-fallback]\n");
}

void parse(int argc, char** argv) {
  std::string colls, types, ops;
  bool quick = false, counts_given = false;
  opt.seed = (uint64_t)std::chrono::system_clock::now().time_since_epoch().count();
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(2, "%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--weft") opt.lib_path[1] = val();
    else if (a == "--nccl") opt.lib_path[0] = val();
    else if (a == "--layout") opt.layout = val();
    else if (a == "--init") opt.init = val();
    else if (a == "--mode") opt.mode = val();
    else if (a == "--windows") opt.windows = true;
    else if (a == "--quick") quick = true;
    else if (a == "--counts") { opt.counts = parse_counts(val()); counts_given = true; }
    else if (a == "--colls") colls = val();
    else if (a == "--types") types = val();
    else if (a == "--ops") ops = val();
    else if (a == "--gpus") opt.gpus = std::stoi(val());
    else if (a == "--seed") opt.seed = std::stoull(val());
    else if (a == "--timeout") opt.timeout = std::stod(val());
    else if (a == "--total-timeout") opt.total_timeout = std::stod(val());
    else if (a == "--replays") opt.replays = std::stoi(val());
    else if (a == "--capture") opt.capture = val();
    else if (a == "--no-hints") opt.hints = false;
    else if (a == "--no-api") opt.api = false;
    else if (a == "--allow-fallback") opt.allow_fallback = true;
    else if (a == "-h" || a == "--help") { usage(); std::exit(0); }
    else { usage(); die(2, "unknown argument %s", a.c_str()); }
  }
  if (opt.layout != "processes" && opt.layout != "threads" && opt.layout != "single") die(2, "--layout: processes, threads or single");
  if (opt.init != "group" && opt.init != "all") die(2, "--init: group or all");
  if (opt.mode != "eager" && opt.mode != "graph") die(2, "--mode: eager or graph");
  if (opt.replays < 2) die(2, "--replays: at least 2");
  // One thread holds every rank's capture open at once while each library's group end issues
  // work for several devices: relaxed mode, so calls another stream's capture would flag as
  // unsafe in thread-local mode stay legal. The other layouts capture one stream per thread.
  if (opt.capture.empty()) opt.capture = opt.layout == "single" ? "relaxed" : "thread";
  if (opt.capture != "thread" && opt.capture != "global" && opt.capture != "relaxed") die(2, "--capture: thread, global or relaxed");
  if (quick && !counts_given) {
    opt.counts = {7, 4099};
    opt.big_counts = {1048579};  // AllReduce and AllGather of float, bfloat16 and int8 only
  }
  opt.colls = colls.empty() ? parse_names("AllReduce,AllGather,ReduceScatter,Broadcast,Reduce,AlltoAll,Gather,Scatter,SendRecv", kNumColls, coll_name)
                            : parse_names(colls, kNumColls, coll_name);
  opt.types = types.empty() ? std::vector<int>{} : parse_names(types, kNumDtypes, dtype_name);
  if (types.empty()) for (int t = 0; t < kNumDtypes; t++) opt.types.push_back(t);
  opt.ops = ops.empty() ? std::vector<int>{kSum, kProd, kMax, kMin, kAvg, kPreMulSum} : parse_names(ops, kNumOps, op_name);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  parse(argc, argv);
  // Before either library loads: never NVLink multicast; argument checks of pointers in NCCL (read
  // once per process, so only where the API checks run); weft itself, not its fallback.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (opt.api && opt.mode == "eager") setenv("NCCL_CHECK_POINTERS", "1", 1);
  if (!opt.allow_fallback) {
    unsetenv("WEFT_NCCL_FALLBACK_LIB");
    unsetenv("WEFT_NCCL_FORCE_FALLBACK");
  }
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die(2, "mmap of the shared state failed");
  shared = new (mem) Shared();
  // The GPU count, from a child (a parent that touched CUDA could not fork working ranks).
  if (opt.gpus == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      int n = 0;
      if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
      shared->gpus = n;
      _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    opt.gpus = shared->gpus;
  }
  nranks = opt.gpus;
  if (nranks < 2 || nranks > kMaxRanks) die(2, "needs 2 to %d GPUs, found %d (--gpus)", kMaxRanks, nranks);
  load_libs();
  std::printf("%d ranks, seed %llu (--seed reproduces the inputs) %s\n", nranks, (unsigned long long)opt.seed, context().c_str());
  int bad = opt.layout == "processes" ? run_processes() : opt.layout == "threads" ? run_threads() : run_single();
  int failed = shared->failed.load() + bad;
  std::printf("%d passed, %d failed\n", shared->passed.load(), failed);
  return failed ? 1 : 0;
}
