// CPU test of reference.h, the part of the conformance harness that decides what a correct
// result is: float formats against CUDA's own host conversions, NCCL's integer semantics on
// hand-worked cases, and every collective's plan (pointers, in place, poison, expectations)
// against a simulated library that is right, and against simulated libraries that are wrong in
// one way each, which must be caught. Needs only the CUDA headers (cuda_fp16.h, cuda_bf16.h,
// cuda_fp8.h), no GPU. Prints `N passed, M failed`; exits non-zero on a failure.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cinttypes>
#include <climits>

#include "reference.h"

using namespace conformance;

static int passed = 0, failed = 0;

static void check(bool ok, const std::string& what) {
  (ok ? passed : failed)++;
  if (!ok) std::printf("FAIL %s\n", what.c_str());
}

// ---- float formats against CUDA's host conversions ----------------------------------------------

static double cuda_decode(int t, uint32_t bits) {
  switch (t) {
    case kHalf: { __half_raw r; r.x = (unsigned short)bits; return (double)__half2float(__half(r)); }
    case kBfloat16: { __nv_bfloat16_raw r; r.x = (unsigned short)bits; return (double)__bfloat162float(__nv_bfloat16(r)); }
    default: {
      __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)bits, t == kFp8E4M3 ? __NV_E4M3 : __NV_E5M2);
      return (double)__half2float(__half(h));
    }
  }
}

static uint32_t cuda_encode(int t, float x) {
  switch (t) {
    case kHalf: return __half_raw(__float2half_rn(x)).x;
    case kBfloat16: return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
    default: return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, t == kFp8E4M3 ? __NV_E4M3 : __NV_E5M2);
  }
}

static void test_float_formats() {
  for (int t : {kHalf, kBfloat16, kFp8E4M3, kFp8E5M2}) {
    FloatFormat f = float_format(t);
    int bad = 0;
    uint32_t first = 0;
    for (uint32_t b = 0; b < (1u << f.bits()); b++) {
      double ours = minifloat_decode(b, f), cuda = cuda_decode(t, b);
      bool same = (std::isnan(ours) && std::isnan(cuda)) || ours == cuda;
      if (!same && bad++ == 0) first = b;
    }
    check(bad == 0, std::string("decode every ") + dtype_name(t) + " bit pattern as CUDA does (" +
                        std::to_string(bad) + " differ, first 0x" + std::to_string(first) + ")");
    // Round to nearest even, subnormals included, against CUDA's conversion from float.
    Rng rng(0x5eed + t);
    bad = 0;
    std::string example;
    for (int i = 0; i < 200000; i++) {
      int e = (int)(rng.next() % 40) - 30;
      float x = (float)std::ldexp(rng.uniform(-2, 2), e);
      if (t >= kFp8E4M3 && std::fabs(x) > f.max_finite()) continue;  // fp8 saturation is not ours
      uint32_t ours = minifloat_encode(x, f), cuda = cuda_encode(t, x);
      if (ours != cuda && bad++ == 0) example = std::to_string(x) + ": " + std::to_string(ours) + " vs " + std::to_string(cuda);
    }
    check(bad == 0, std::string("round floats to ") + dtype_name(t) + " as CUDA does (" + std::to_string(bad) +
                        " differ; " + example + ")");
  }
  check(float_format(kHalf).max_finite() == 65504.0, "half max 65504");
  check(float_format(kFp8E4M3).max_finite() == 448.0, "e4m3 max 448");
  check(float_format(kFp8E5M2).max_finite() == 57344.0, "e5m2 max 57344");
  check(float_format(kBfloat16).unit_roundoff() == std::ldexp(1.0, -8), "bfloat16 unit roundoff 2^-8");
}

// ---- NCCL's integer semantics -------------------------------------------------------------------

template <typename T>
static T reduce(int op, std::initializer_list<T> v, std::initializer_list<T> s = {}) {
  std::vector<T> vals(v), sc(s);
  sc.resize(vals.size());
  return int_reduce<T>(op, vals.data(), sc.data(), (int)vals.size());
}

static void test_integer_semantics() {
  check(reduce<int8_t>(kAvg, {127, 127}) == -1, "int8 avg wraps the sum first: (127+127 -> -2)/2 = -1");
  check(reduce<uint8_t>(kAvg, {200, 100}) == 22, "uint8 avg: (300 -> 44)/2 = 22");
  check(reduce<int32_t>(kAvg, {-3, 0}) == -1, "int32 avg truncates toward zero: -3/2 = -1");
  check(reduce<int8_t>(kAvg, {-7, 0, 0}) == -2, "int8 avg truncates toward zero: -7/3 = -2");
  check(reduce<int32_t>(kAvg, {INT32_MIN, -1}) == 1073741823, "int32 avg: (MIN-1 wraps to MAX)/2");
  check(reduce<int64_t>(kAvg, {INT64_MIN, 0}) == INT64_MIN / 2, "int64 avg of MIN and 0");
  check(reduce<int64_t>(kAvg, {INT64_MIN, 0, 0}) == -3074457345618258602LL, "int64 avg of MIN over 3 ranks");
  check(reduce<uint64_t>(kAvg, {UINT64_MAX, 2}) == 0, "uint64 avg: (MAX+2 wraps to 1)/2 = 0");
  check(reduce<int8_t>(kSum, {100, 100}) == -56, "int8 sum wraps");
  check(reduce<int8_t>(kProd, {16, 16}) == 0, "int8 prod wraps");
  check(reduce<uint32_t>(kProd, {65536, 65536}) == 0, "uint32 prod wraps");
  check(reduce<int32_t>(kProd, {-65536, 65537}) == -65536, "int32 prod wraps (-65536*65537 = -2^32-65536)");
  check(reduce<int8_t>(kMax, {-1, 1}) == 1 && reduce<uint8_t>(kMax, {255, 1}) == 255, "max signed vs unsigned");
  check(reduce<int64_t>(kMin, {INT64_MIN, 5}) == INT64_MIN, "int64 min");
  check(reduce<int8_t>(kPreMulSum, {100, -2}, {3, 5}) == 34, "int8 premulsum: (300 -> 44) + (-10) = 34");
  check(reduce<uint32_t>(kPreMulSum, {0x80000000u, 1}, {2, 7}) == 7, "uint32 premulsum wraps each product");
  uint64_t v[2] = {0xff, 0x01}, s[2] = {0, 0};
  check(int_reduce_bits(kInt8, kSum, v, s, 2) == 0, "bits: int8 -1 + 1 = 0");
  check(int_reduce_bits(kUint8, kSum, v, s, 2) == 0, "bits: uint8 255 + 1 wraps to 0");
}

static void test_float_reference() {
  double v[3] = {1.0, -0.5, 0.25}, s[3] = {2.0, 4.0, 8.0};
  FloatRef sum = float_reduce(kFloat, kSum, v, s, 3), avg = float_reduce(kFloat, kAvg, v, s, 3);
  FloatRef pre = float_reduce(kHalf, kPreMulSum, v, s, 3), mx = float_reduce(kBfloat16, kMax, v, s, 3);
  FloatRef pr = float_reduce(kDouble, kProd, v, s, 3);
  check(sum.value == 0.75 && sum.bound > 0 && sum.bound < 1e-5, "float sum reference and a float-sized bound");
  check(avg.value == 0.25, "avg = sum / n");
  check(pre.value == 2.0 - 2.0 + 2.0 && pre.bound > 1e-3 && pre.bound < 0.1, "premulsum = sum of scalar*x, half-sized bound");
  check(mx.value == 1.0 && mx.bound == 0, "max is exact");
  check(pr.value == -0.125 && pr.bound < 1e-14, "prod reference with a double-sized bound");
}

// ---- plans against simulated libraries ------------------------------------------------------------

enum Mutation { kRight, kSkipLast, kFloorAvg, kDropRank, kWriteNonRoot, kSwapBlocks, kRootScalarOnly, kNumMutations };
static const char* mutation_name[] = {"right", "skips the last element", "floors integer avg",
                                      "leaves out the last rank of a float reduction (avg: divides by n + 1)", "writes recvbuff of a non-root",
                                      "swaps the first two blocks", "uses rank 0's PreMulSum scalar everywhere"};

/// One rank's memory in the simulation.
struct SimRank {
  std::vector<uint8_t> send, recv;
  const uint8_t* sendp(const Placement& p, size_t es) const {
    return p.send_in_region ? recv.data() + p.send_off * es : send.data() + p.send_off * es;
  }
};

/// Runs the collective over the simulated ranks the way a library would: every rank's send
/// pointer is read (before anything is written), the results land at each receive pointer.
static void simulate(const Case& c, std::vector<SimRank>& mem, const std::vector<RankPlan>& plans,
                     const std::vector<uint64_t>& scalars, Mutation mut) {
  size_t es = dtype_size(c.dtype), n = c.nranks, k = c.count;
  std::vector<std::vector<uint8_t>> in(n);
  for (size_t r = 0; r < n; r++) {
    size_t len = input_elems(c, (int)r) * es;
    const uint8_t* p = mem[r].sendp(plans[r].place, es);
    in[r].assign(p, p + len);
  }
  auto reduce_at = [&](uint8_t* dst, size_t si) {
    if (!dtype_is_float(c.dtype)) {
      std::vector<uint64_t> v(n), s(scalars);
      for (size_t r = 0; r < n; r++) v[r] = load_bits(c.dtype, in[r].data(), si);
      if (mut == kRootScalarOnly) std::fill(s.begin(), s.end(), scalars[0]);
      uint64_t out = int_reduce_bits(c.dtype, c.op, v.data(), s.data(), (int)n);
      if (mut == kFloorAvg && c.op == kAvg && dtype_is_signed_int(c.dtype)) {
        uint64_t sum = int_reduce_bits(c.dtype, kSum, v.data(), s.data(), (int)n);
        int64_t sv = (int64_t)(sum << (64 - 8 * es)) >> (64 - 8 * es);
        int64_t q = sv / (int64_t)n - ((sv % (int64_t)n) < 0 ? 1 : 0);
        out = (uint64_t)q;
      }
      store_bits(c.dtype, dst, 0, out);
    } else {
      std::vector<double> v(n), s(n);
      for (size_t r = 0; r < n; r++) {
        v[r] = load_float(c.dtype, in[r].data(), si);
        uint64_t b = mut == kRootScalarOnly ? scalars[0] : scalars[r];
        s[r] = load_float(c.dtype, &b, 0);
      }
      bool drop = mut == kDropRank && c.op != kAvg;
      double x = float_reduce(c.dtype, c.op, v.data(), s.data(), (int)n - (drop ? 1 : 0)).value;
      if (mut == kDropRank && c.op == kAvg) x = x * n / (n + 1);
      store_float(c.dtype, dst, 0, x);
    }
  };
  for (size_t r = 0; r < n; r++) {
    const Placement& pl = plans[r].place;
    uint8_t* out = mem[r].recv.data() + pl.recv_off * es;
    bool root = (int)r == c.root;
    switch (c.coll) {
      case kAllReduce: for (size_t i = 0; i < k; i++) reduce_at(out + i * es, i); break;
      case kReduceScatter: for (size_t i = 0; i < k; i++) reduce_at(out + i * es, r * k + i); break;
      case kReduce:
        if (root) for (size_t i = 0; i < k; i++) reduce_at(out + i * es, i);
        else if (mut == kWriteNonRoot) out[0] ^= 1;
        break;
      case kBroadcast: std::memcpy(out, in[c.root].data(), k * es); break;
      case kAllGather: for (size_t q = 0; q < n; q++) std::memcpy(out + q * k * es, in[q].data(), k * es); break;
      case kAlltoAll: case kSendRecv:
        for (size_t q = 0; q < n; q++) std::memcpy(out + q * k * es, in[q].data() + r * k * es, k * es);
        break;
      case kGather:
        if (root) for (size_t q = 0; q < n; q++) std::memcpy(out + q * k * es, in[q].data(), k * es);
        else if (mut == kWriteNonRoot) out[0] ^= 1;
        break;
      case kScatter: std::memcpy(out, in[c.root].data() + r * k * es, k * es); break;
      default: break;
    }
    size_t written = (c.coll == kAllGather || c.coll == kAlltoAll || c.coll == kSendRecv || c.coll == kGather) ? n * k : k;
    if (mut == kSwapBlocks && n >= 2 && (c.coll == kAllGather || c.coll == kAlltoAll || c.coll == kSendRecv)) {
      std::vector<uint8_t> tmp(out, out + k * es);
      std::memcpy(out, out + k * es, k * es);
      std::memcpy(out + k * es, tmp.data(), k * es);
    }
    bool writes = !(c.coll == kReduce || c.coll == kGather) || root;
    if (mut == kSkipLast && writes) {  // put the poison back on the last output element
      size_t last = pl.recv_off + written - 1;
      for (size_t b = 0; b < es; b++) mem[r].recv[last * es + b] = plans[r].region_init[last * es + b];
    }
  }
}

/// Plans one case on every rank, simulates it, and returns the first rank's mismatch, if any;
/// `changed` (when given) tells whether the mutation left memory different from a right library.
static Mismatch run_case(const Case& c, Mutation mut, uint64_t seed, bool* changed = nullptr) {
  std::vector<std::vector<uint8_t>> inputs(c.nranks);
  std::vector<uint64_t> scalars(c.nranks);
  for (int r = 0; r < c.nranks; r++) {
    inputs[r] = random_input(c.dtype, c.op, input_elems(c, r), mix(seed, r));
    scalars[r] = random_scalar(c.dtype, mix(seed, 100 + r));
  }
  std::vector<RankPlan> plans;
  std::vector<SimRank> mem(c.nranks);
  size_t es = dtype_size(c.dtype);
  for (int r = 0; r < c.nranks; r++) {
    plans.push_back(plan_rank(c, r, inputs, scalars, mix(seed, 200 + r)));
    mem[r].send = plans[r].send_init;
    mem[r].send.resize(std::max(mem[r].send.size(), (size_t)1));
    mem[r].recv = plans[r].region_init;
    if (plans[r].region_init.size() != plans[r].expect.elems * es) return {1, 0, "region size mismatch"};
  }
  std::vector<SimRank> right = mem;
  simulate(c, mem, plans, scalars, mut);
  if (changed) {
    simulate(c, right, plans, scalars, kRight);
    *changed = false;
    for (int r = 0; r < c.nranks; r++) *changed |= right[r].recv != mem[r].recv;
  }
  for (int r = 0; r < c.nranks; r++) {
    Mismatch m = check_region(plans[r].expect, mem[r].recv.data(), plans[r].region_init.data());
    if (m.wrong) {
      m.what = "rank " + std::to_string(r) + ": " + m.what;
      return m;
    }
  }
  return {};
}

static void test_plans() {
  int cases = 0, wrong = 0;
  std::string first;
  // [m][0]: cases whose outputs are exact (integers, data movement); [m][1]: float reductions.
  int caught[kNumMutations][2] = {}, applicable[kNumMutations][2] = {};
  uint64_t seed = 1;
  for (int nranks : {2, 3}) {
    for (int coll = 0; coll < kNumColls; coll++) {
      for (int dt = 0; dt < kNumDtypes; dt++) {
        for (int op = 0; op < (coll_reduces(coll) ? kNumOps : 1); op++) {
          for (size_t count : {1, 7, 33}) {
            for (bool in_place : {false, true}) {
              for (int root = 0; root < (coll_has_root(coll) ? nranks : 1); root++) {
                Case c{coll, dt, coll_reduces(coll) ? op : kSum, count, in_place, root, nranks};
                seed++;
                Mismatch right = run_case(c, kRight, seed);
                cases++;
                if (right.wrong && wrong++ == 0)
                  first = std::string(coll_name(coll)) + " " + dtype_name(dt) + " " + op_name(op) + " count " +
                          std::to_string(count) + (in_place ? " in place" : "") + ": " + right.what;
                for (int m = 1; m < kNumMutations; m++) {
                  // fp8's bound (2u is 1/8 or 1/4) is too loose to see one rank left out, or (in place) a
                  // skipped element that kept its input.
                  bool applies = (m == kSkipLast && !(in_place && coll_reduces(coll) && dt >= kFp8E4M3)) || (m == kFloorAvg && coll_reduces(coll) && op == kAvg) ||
                                 (m == kDropRank && coll_reduces(coll) && dtype_is_float(dt) && dt < kFp8E4M3 &&
                                  op != kMax && op != kMin && count >= 7) ||
                                 (m == kWriteNonRoot) || (m == kSwapBlocks) || (m == kRootScalarOnly && op == kPreMulSum && dt < kFp8E4M3 && count >= 7);
                  bool changed = false;
                  Mismatch mm = applies ? run_case(c, (Mutation)m, seed, &changed) : Mismatch{};
                  if (!changed) continue;
                  int fl = coll_reduces(coll) && dtype_is_float(dt);
                  applicable[m][fl]++;
                  if (mm.wrong) caught[m][fl]++;
                }
              }
            }
          }
        }
      }
    }
  }
  check(wrong == 0, "a right library passes every plan (" + std::to_string(cases) + " cases, " + std::to_string(wrong) +
                        " wrong; first: " + first + ")");
  // Exact outputs catch every mutation that changed them. A float result can land within its
  // bound by chance (in place, a skipped element keeps the input, which may be close to the sum),
  // so float reductions must catch at least 95% of the cases.
  for (int m = 1; m < kNumMutations; m++) {
    for (int fl = 0; fl < 2; fl++) {
      if (!applicable[m][fl]) continue;
      bool ok = fl ? caught[m][fl] >= 0.95 * applicable[m][fl] : caught[m][fl] == applicable[m][fl];
      check(ok, std::string("a library that ") + mutation_name[m] + " is caught (" + std::to_string(caught[m][fl]) +
                    " of " + std::to_string(applicable[m][fl]) + (fl ? " float reductions)" : " exact cases)"));
    }
  }
  check(applicable[kFloorAvg][0] > 0 && applicable[kDropRank][1] > 0 && applicable[kRootScalarOnly][0] > 0 &&
            applicable[kWriteNonRoot][0] > 0 && applicable[kSwapBlocks][0] > 0,
        "every mutation applied to some case");
  // The first wrong element is named, with both values.
  Case c{kAllReduce, kInt32, kSum, 7, false, 0, 2};
  Mismatch m = run_case(c, kSkipLast, 99);
  check(m.wrong == 1 && m.first == 6 && m.what.find("never written") != std::string::npos &&
            m.what.find("index 6") != std::string::npos,
        "a skipped element is reported at its index as never written: " + m.what);
}

int main() {
  test_float_formats();
  test_integer_semantics();
  test_float_reference();
  test_plans();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
