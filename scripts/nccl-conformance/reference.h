// Host-side semantics of the NCCL collectives, shared by the conformance harness
// (conformance.cpp) and its CPU test (reference_test.cpp). No CUDA and no NCCL here: element
// types are numbered as ncclDataType_t numbers them, operators as ncclRedOp_t, so that every piece
// of logic that decides what a correct result is can be tested without a GPU.
//
// What "correct" means, per NCCL 2.28:
//   - integers (every operator): bit for bit. Sum and product wrap in the element type; average is
//     that wrapping sum divided by the rank count, truncating toward zero; PreMulSum is the
//     wrapping sum over ranks of (rank's scalar * rank's input), each product wrapping too.
//   - floating point: within an error bound of the float64 reference. Sum, average and PreMulSum
//     are bounded by (n + 2) * 2u * sum|term| plus a few subnormal quanta (u: the unit roundoff of
//     the element type, n: the rank count), product by (n + 1) * 2u * |product|; max and min are
//     exact (numerically: -0 == +0).
//   - data movement (AllGather, Broadcast, AlltoAll, Gather, Scatter, Send/Recv): bit for bit for
//     every type.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace conformance {

// ---- element types (numbered as ncclDataType_t) ------------------------------------------------

enum Dtype : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kHalf = 6, kFloat = 7, kDouble = 8, kBfloat16 = 9, kFp8E4M3 = 10, kFp8E5M2 = 11,
  kNumDtypes = 12
};

inline const char* dtype_name(int t) {
  static const char* names[] = {"int8", "uint8",  "int32",  "uint32",   "int64",   "uint64",
                                "half", "float",  "double", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return t >= 0 && t < kNumDtypes ? names[t] : "?";
}

inline size_t dtype_size(int t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return t >= 0 && t < kNumDtypes ? sizes[t] : 0;
}

inline bool dtype_is_float(int t) { return t >= kHalf; }
inline bool dtype_is_signed_int(int t) { return t == kInt8 || t == kInt32 || t == kInt64; }

/// A binary floating-point format: exponent bits, mantissa bits, bias, and whether the top
/// exponent encodes infinities/NaN (IEEE) or only NaN at all-ones (e4m3 "fn").
struct FloatFormat {
  int exp_bits, man_bits, bias;
  bool ieee;
  int bits() const { return 1 + exp_bits + man_bits; }
  double max_finite() const {
    int top = (1 << exp_bits) - 1;
    if (ieee) return std::ldexp(2.0 - std::ldexp(1.0, -man_bits), top - 1 - bias);
    // e4m3fn: all-ones exponent is finite except mantissa all ones (NaN).
    return std::ldexp(1.0 + (double)((1 << man_bits) - 2) / (1 << man_bits), top - bias);
  }
  double min_subnormal() const { return std::ldexp(1.0, 1 - bias - man_bits); }
  double unit_roundoff() const { return std::ldexp(1.0, -(man_bits + 1)); }
};

inline FloatFormat float_format(int t) {
  switch (t) {
    case kHalf: return {5, 10, 15, true};
    case kBfloat16: return {8, 7, 127, true};
    case kFp8E4M3: return {4, 3, 7, false};
    case kFp8E5M2: return {5, 2, 15, true};
    case kFloat: return {8, 23, 127, true};
    default: return {11, 52, 1023, true};
  }
}

/// Decodes a value of a small float format (half, bfloat16, fp8) from its bits.
inline double minifloat_decode(uint32_t bits, FloatFormat f) {
  uint32_t man = bits & ((1u << f.man_bits) - 1);
  uint32_t exp = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1);
  bool neg = (bits >> (f.exp_bits + f.man_bits)) & 1;
  uint32_t top = (1u << f.exp_bits) - 1;
  double v;
  if (f.ieee && exp == top) {
    v = man ? NAN : INFINITY;
  } else if (!f.ieee && exp == top && man == (1u << f.man_bits) - 1) {
    v = NAN;
  } else if (exp == 0) {
    v = std::ldexp((double)man, 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp((double)(man | (1u << f.man_bits)), (int)exp - f.bias - f.man_bits);
  }
  return neg ? -v : v;
}

/// Encodes x in a small float format, rounding to nearest even; a finite x beyond the largest
/// finite value becomes infinity (IEEE formats) or saturates (e4m3fn, as CUDA's __NV_SATFINITE).
inline uint32_t minifloat_encode(double x, FloatFormat f) {
  uint32_t sign = std::signbit(x) ? 1u << (f.exp_bits + f.man_bits) : 0;
  uint32_t top = (1u << f.exp_bits) - 1;
  uint32_t man_mask = (1u << f.man_bits) - 1;
  if (std::isnan(x)) return f.ieee ? (top << f.man_bits) | (1u << (f.man_bits - 1)) : (top << f.man_bits) | man_mask;
  double a = std::fabs(x);
  if (std::isinf(a)) return f.ieee ? sign | (top << f.man_bits) : sign | (top << f.man_bits) | (man_mask - 1);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit is worth 2^(e-1)
  int lead = e - 1 < 1 - f.bias ? 1 - f.bias : e - 1;
  double quantum = std::ldexp(1.0, lead - f.man_bits);
  double r = std::nearbyint(a / quantum) * quantum;  // ties to even (default rounding mode)
  if (r > f.max_finite()) {
    return f.ieee ? sign | (top << f.man_bits) : sign | (top << f.man_bits) | (man_mask - 1);
  }
  double min_normal = std::ldexp(1.0, 1 - f.bias);
  if (r < min_normal) return sign | (uint32_t)(r / f.min_subnormal());
  int re;
  std::frexp(r, &re);
  uint32_t exp_field = (uint32_t)(re - 1 + f.bias);
  uint32_t man = (uint32_t)(std::ldexp(r, f.man_bits - (re - 1)) - std::ldexp(1.0, f.man_bits));
  return sign | (exp_field << f.man_bits) | man;
}

/// Element i of a buffer of type t as a double (float types only).
inline double load_float(int t, const void* buf, size_t i) {
  const uint8_t* p = (const uint8_t*)buf + i * dtype_size(t);
  switch (t) {
    case kFloat: { float v; std::memcpy(&v, p, 4); return v; }
    case kDouble: { double v; std::memcpy(&v, p, 8); return v; }
    case kHalf: case kBfloat16: { uint16_t b; std::memcpy(&b, p, 2); return minifloat_decode(b, float_format(t)); }
    default: return minifloat_decode(*p, float_format(t));
  }
}

/// Stores x (rounded to nearest even) as element i of a buffer of float type t.
inline void store_float(int t, void* buf, size_t i, double x) {
  uint8_t* p = (uint8_t*)buf + i * dtype_size(t);
  switch (t) {
    case kFloat: { float v = (float)x; std::memcpy(p, &v, 4); return; }
    case kDouble: std::memcpy(p, &x, 8); return;
    case kHalf: case kBfloat16: { uint16_t b = (uint16_t)minifloat_encode(x, float_format(t)); std::memcpy(p, &b, 2); return; }
    default: *p = (uint8_t)minifloat_encode(x, float_format(t)); return;
  }
}

/// Element i of an integer buffer, its bits zero-extended to 64.
inline uint64_t load_bits(int t, const void* buf, size_t i) {
  uint64_t v = 0;
  std::memcpy(&v, (const uint8_t*)buf + i * dtype_size(t), dtype_size(t));
  return v;
}

inline void store_bits(int t, void* buf, size_t i, uint64_t v) {
  std::memcpy((uint8_t*)buf + i * dtype_size(t), &v, dtype_size(t));
}

// ---- operators (numbered as ncclRedOp_t; PreMulSum is ours) -------------------------------------

enum Op : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPreMulSum = 5, kNumOps = 6 };

inline const char* op_name(int op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return op >= 0 && op < kNumOps ? names[op] : "?";
}

/// NCCL's integer reduction of vals[0..n) (one per rank) with operator op; scalars[r] is rank r's
/// PreMulSum scalar. Everything wraps in T; avg truncates toward zero.
template <typename T>
T int_reduce(int op, const T* vals, const T* scalars, int n) {
  using U = std::make_unsigned_t<T>;
  auto add = [](T a, T b) { return (T)(U)((uint64_t)(U)a + (uint64_t)(U)b); };
  auto mul = [](T a, T b) { return (T)(U)((uint64_t)(U)a * (uint64_t)(U)b); };
  T acc = op == kPreMulSum ? mul(scalars[0], vals[0]) : vals[0];
  for (int r = 1; r < n; r++) {
    switch (op) {
      case kSum: case kAvg: acc = add(acc, vals[r]); break;
      case kProd: acc = mul(acc, vals[r]); break;
      case kMax: acc = vals[r] > acc ? vals[r] : acc; break;
      case kMin: acc = vals[r] < acc ? vals[r] : acc; break;
      default: acc = add(acc, mul(scalars[r], vals[r])); break;
    }
  }
  if (op == kAvg) {
    if (std::is_signed<T>::value) {
      // Exact quotient of the wrapped sum, truncated toward zero (no overflow in 128 bits).
      acc = (T)((__int128)acc / n);
    } else {
      acc = (T)((U)acc / (U)n);
    }
  }
  return acc;
}

/// Integer reduction on raw bits (zero-extended to 64), dispatching on the element type.
inline uint64_t int_reduce_bits(int t, int op, const uint64_t* vals, const uint64_t* scalars, int n) {
  auto run = [&](auto zero) -> uint64_t {
    using T = decltype(zero);
    std::vector<T> v(n), s(n);
    for (int r = 0; r < n; r++) {
      std::memcpy(&v[r], &vals[r], sizeof(T));
      std::memcpy(&s[r], &scalars[r], sizeof(T));
    }
    T out = int_reduce<T>(op, v.data(), s.data(), n);
    uint64_t bits = 0;
    std::memcpy(&bits, &out, sizeof(T));
    return bits;
  };
  switch (t) {
    case kInt8: return run(int8_t{});
    case kUint8: return run(uint8_t{});
    case kInt32: return run(int32_t{});
    case kUint32: return run(uint32_t{});
    case kInt64: return run(int64_t{});
    default: return run(uint64_t{});
  }
}

/// The float64 reference of a float reduction and the error NCCL may make on it.
struct FloatRef {
  double value, bound;
};

inline FloatRef float_reduce(int t, int op, const double* vals, const double* scalars, int n) {
  FloatFormat f = float_format(t);
  double u = f.unit_roundoff(), tiny = f.min_subnormal();
  double acc = 0, mag = 0;
  switch (op) {
    case kMax: case kMin: {
      acc = vals[0];
      for (int r = 1; r < n; r++) acc = op == kMax ? std::fmax(acc, vals[r]) : std::fmin(acc, vals[r]);
      return {acc, 0.0};
    }
    case kProd: {
      acc = 1;
      for (int r = 0; r < n; r++) acc *= vals[r];
      return {acc, (n + 1) * 2 * u * std::fabs(acc) + 2 * tiny};
    }
    default: {
      for (int r = 0; r < n; r++) {
        double term = op == kPreMulSum ? scalars[r] * vals[r] : op == kAvg ? vals[r] / n : vals[r];
        acc += term;
        mag += std::fabs(term);
      }
      return {acc, (n + 2) * 2 * u * mag + (n + 2) * tiny};
    }
  }
}

// ---- collectives ------------------------------------------------------------------------------

enum Coll : int {
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAlltoAll, kGather, kScatter, kSendRecv, kNumColls
};

inline const char* coll_name(int c) {
  static const char* names[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",
                                "AlltoAll",  "Gather",    "Scatter",       "SendRecv"};
  return c >= 0 && c < kNumColls ? names[c] : "?";
}

inline bool coll_reduces(int c) { return c == kAllReduce || c == kReduceScatter || c == kReduce; }
inline bool coll_has_root(int c) { return c == kBroadcast || c == kReduce || c == kGather || c == kScatter; }

/// One collective call, as every rank makes it.
struct Case {
  int coll, dtype, op;  // op only for reducing collectives
  size_t count;         // NCCL's count argument (per-rank block for AllGather, ReduceScatter, ...)
  bool in_place;
  int root;
  int nranks;
};

/// Elements of a rank's logical input: the whole send buffer as NCCL reads it.
inline size_t input_elems(const Case& c, int rank) {
  switch (c.coll) {
    case kReduceScatter: case kAlltoAll: case kSendRecv: return c.count * c.nranks;
    case kScatter: return rank == c.root ? c.count * c.nranks : 0;
    case kBroadcast: return rank == c.root || c.in_place ? c.count : 0;
    default: return c.count;
  }
}

/// Where a rank's buffers point, in elements: the send pointer is sendbuf + send_off, or
/// recvbuf + send_off when send_in_region; the receive pointer is recvbuf + recv_off. `region`
/// elements of recvbuf starting at 0 are initialised before the call and checked after it;
/// for Send/Recv, send_off / recv_off are where the per-peer blocks start.
struct Placement {
  bool send_in_region;
  size_t send_off, recv_off, region;
};

inline Placement placement(const Case& c, int rank) {
  size_t n = c.nranks, k = c.count;
  if (!c.in_place) {
    size_t region = k;
    switch (c.coll) {
      case kAllGather: case kAlltoAll: case kSendRecv: region = n * k; break;
      case kGather: region = n * k; break;
      default: break;
    }
    return {false, 0, 0, region};
  }
  switch (c.coll) {
    case kAllGather: return {true, rank * k, 0, n * k};
    case kReduceScatter: return {true, 0, rank * k, n * k};
    case kAlltoAll: return {true, 0, 0, n * k};
    case kSendRecv: return {true, 0, n * k, 2 * n * k};  // one buffer: send blocks, then receive blocks
    case kGather:
      // In place at the root only (sendbuff == recvbuff + root * count); elsewhere out of place.
      return rank == c.root ? Placement{true, rank * k, 0, n * k} : Placement{false, 0, 0, n * k};
    case kScatter:
      return rank == c.root ? Placement{true, 0, rank * k, n * k} : Placement{false, 0, 0, k};
    default: return {true, 0, 0, k};  // AllReduce, Broadcast, Reduce: sendbuff == recvbuff
  }
}

/// What one element of a rank's checked region must hold after the call.
struct Expected {
  int dtype = 0;
  size_t elems = 0;
  std::vector<uint8_t> bytes;   // exact expectation (or the float reference rounded, for poison)
  std::vector<uint8_t> approx;  // 1 where the element is a float reduction checked with a bound
  std::vector<double> value, bound;
};

/// A rank's buffers before the call and what they must hold after it.
struct RankPlan {
  Placement place;
  std::vector<uint8_t> send_init;    // contents of sendbuf (when the input is out of place)
  std::vector<uint8_t> region_init;  // contents of recvbuf[0, region)
  Expected expect;
};

/// Builds rank `rank`'s plan from every rank's logical input (inputs[r]: input_elems(c, r)
/// elements) and PreMulSum scalars (bits, one per rank). `fill_seed` seeds the bytes of elements
/// that must stay untouched (recvbuff of a non-root Reduce or Gather). Outputs are poisoned with
/// the bitwise complement of their expected bytes (NaN for a float reduction, whose check has a
/// bound), so an element left unwritten always fails.
inline RankPlan plan_rank(const Case& c, int rank, const std::vector<std::vector<uint8_t>>& inputs,
                          const std::vector<uint64_t>& scalar_bits, uint64_t fill_seed) {
  RankPlan p;
  size_t es = dtype_size(c.dtype), n = c.nranks, k = c.count;
  p.place = placement(c, rank);
  Expected& e = p.expect;
  e.dtype = c.dtype;
  e.elems = p.place.region;
  e.bytes.assign(e.elems * es, 0);
  e.approx.assign(e.elems, 0);
  e.value.assign(e.elems, 0);
  e.bound.assign(e.elems, 0);
  // What each element of the region is: 0 an output, 1 untouched by the call (it keeps the
  // arbitrary bytes put there), 2 the rank's own input placed in the region (kept unless output).
  std::vector<uint8_t> role(e.elems, 1);
  const std::vector<uint8_t>& in = inputs[rank];
  if (p.place.send_in_region) {
    std::memcpy(e.bytes.data() + p.place.send_off * es, in.data(), in.size());
    std::fill(role.begin() + p.place.send_off, role.begin() + p.place.send_off + in.size() / es, 2);
  }
  size_t out = p.place.recv_off;  // where the outputs start
  auto copy_out = [&](size_t di, const std::vector<uint8_t>& src, size_t si, size_t cnt) {
    std::memcpy(e.bytes.data() + di * es, src.data() + si * es, cnt * es);
    std::fill(role.begin() + di, role.begin() + di + cnt, 0);
  };
  auto reduce_into = [&](size_t di, size_t si) {
    role[di] = 0;
    if (!dtype_is_float(c.dtype)) {
      std::vector<uint64_t> v(n);
      for (size_t r = 0; r < n; r++) v[r] = load_bits(c.dtype, inputs[r].data(), si);
      store_bits(c.dtype, e.bytes.data(), di, int_reduce_bits(c.dtype, c.op, v.data(), scalar_bits.data(), (int)n));
    } else {
      std::vector<double> v(n), s(n);
      for (size_t r = 0; r < n; r++) {
        v[r] = load_float(c.dtype, inputs[r].data(), si);
        uint64_t b = scalar_bits[r];
        s[r] = load_float(c.dtype, &b, 0);
      }
      FloatRef ref = float_reduce(c.dtype, c.op, v.data(), s.data(), (int)n);
      e.approx[di] = 1;  // max and min: a zero bound, so numerically exact (-0 == +0)
      e.value[di] = ref.value;
      e.bound[di] = ref.bound;
      store_float(c.dtype, e.bytes.data(), di, ref.value);
    }
  };
  bool is_root = rank == c.root;
  switch (c.coll) {
    case kAllReduce: for (size_t i = 0; i < k; i++) reduce_into(out + i, i); break;
    case kReduceScatter: for (size_t i = 0; i < k; i++) reduce_into(out + i, rank * k + i); break;
    case kReduce: if (is_root) for (size_t i = 0; i < k; i++) reduce_into(out + i, i); break;
    case kBroadcast: copy_out(out, inputs[c.root], 0, k); break;
    case kAllGather: for (size_t q = 0; q < n; q++) copy_out(out + q * k, inputs[q], 0, k); break;
    case kAlltoAll: case kSendRecv:
      for (size_t q = 0; q < n; q++) copy_out(out + q * k, inputs[q], rank * k, k);
      break;
    case kGather: if (is_root) for (size_t q = 0; q < n; q++) copy_out(out + q * k, inputs[q], 0, k); break;
    case kScatter: copy_out(out, inputs[c.root], rank * k, k); break;
    default: break;
  }
  // Untouched elements get arbitrary bytes; outputs are poisoned with the complement of what they
  // must become; the input placed in the region goes in as it is.
  uint64_t s = fill_seed | 1;
  p.region_init.resize(e.elems * es);
  for (size_t i = 0; i < e.elems; i++) {
    for (size_t b = 0; b < es; b++) {
      size_t j = i * es + b;
      if (role[i] == 1) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        e.bytes[j] = (uint8_t)s;
      }
      // (a float reduction's output starts as NaN: all ones is NaN in every float format)
      p.region_init[j] = role[i] != 0 ? e.bytes[j] : e.approx[i] ? (uint8_t)0xff : (uint8_t)~e.bytes[j];
    }
  }
  if (p.place.send_in_region) {
    std::memcpy(p.region_init.data() + p.place.send_off * es, in.data(), in.size());
  } else {
    p.send_init = in;
  }
  return p;
}

// ---- comparison -------------------------------------------------------------------------------

/// Formats element i of a buffer of type t: hex bits and value.
inline std::string format_elem(int t, const void* buf, size_t i) {
  char s[96];
  uint64_t bits = load_bits(t, buf, i);
  int w = (int)dtype_size(t) * 2;
  if (dtype_is_float(t)) {
    std::snprintf(s, sizeof s, "0x%0*llx (%.9g)", w, (unsigned long long)bits, load_float(t, buf, i));
  } else if (dtype_is_signed_int(t)) {
    int64_t v = (int64_t)(bits << (64 - 8 * dtype_size(t))) >> (64 - 8 * dtype_size(t));
    std::snprintf(s, sizeof s, "0x%0*llx (%lld)", w, (unsigned long long)bits, (long long)v);
  } else {
    std::snprintf(s, sizeof s, "0x%0*llx (%llu)", w, (unsigned long long)bits, (unsigned long long)bits);
  }
  return s;
}

/// Whether element i of `got` meets the expectation.
inline bool elem_ok(const Expected& e, const uint8_t* got, size_t i) {
  size_t es = dtype_size(e.dtype);
  if (!e.approx[i]) return std::memcmp(got + i * es, e.bytes.data() + i * es, es) == 0;
  double g = load_float(e.dtype, got, i);
  if (!std::isfinite(g)) return false;
  return std::fabs(g - e.value[i]) <= e.bound[i];
}

/// The result of checking a region: how many elements are wrong and a description of the first.
struct Mismatch {
  size_t wrong = 0;
  size_t first = 0;
  std::string what;  // empty when everything matched
};

/// Checks `got` against the expectation; `before` (may be null) is what the region held before the
/// call, `other` (may be null) another library's output of the same call, shown next to the first
/// wrong element.
inline Mismatch check_region(const Expected& e, const uint8_t* got, const uint8_t* before = nullptr,
                             const uint8_t* other = nullptr, const char* other_name = "other") {
  Mismatch m;
  for (size_t i = 0; i < e.elems; i++) {
    if (elem_ok(e, got, i)) continue;
    if (m.wrong++ == 0) m.first = i;
  }
  if (m.wrong) {
    size_t i = m.first;
    std::string want = e.approx[i] ? std::to_string(e.value[i]) + " +- " + std::to_string(e.bound[i])
                                   : format_elem(e.dtype, e.bytes.data(), i);
    m.what = std::to_string(m.wrong) + " of " + std::to_string(e.elems) + " elements wrong, first at index " +
             std::to_string(i) + ": got " + format_elem(e.dtype, got, i) + ", want " + want;
    size_t es = dtype_size(e.dtype);
    if (before && std::memcmp(got + i * es, before + i * es, es) == 0) m.what += " [unchanged since before the call: never written]";
    if (other) m.what += std::string(", ") + other_name + " gave " + format_elem(e.dtype, other, i);
  }
  return m;
}

/// Whether two libraries' outputs agree: bitwise where the expectation is exact, within twice
/// the bound where it is a float reduction.
inline bool outputs_agree(const Expected& e, const uint8_t* a, const uint8_t* b, size_t* first = nullptr) {
  size_t es = dtype_size(e.dtype);
  for (size_t i = 0; i < e.elems; i++) {
    bool same = e.approx[i] ? std::fabs(load_float(e.dtype, a, i) - load_float(e.dtype, b, i)) <= 2 * e.bound[i]
                            : std::memcmp(a + i * es, b + i * es, es) == 0;
    if (!same) {
      if (first) *first = i;
      return false;
    }
  }
  return true;
}

// ---- inputs -----------------------------------------------------------------------------------

/// SplitMix64: the harness's only random source, so every rank derives every rank's input.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(next() >> 11) * 0x1.0p-53; }
};

inline uint64_t mix(uint64_t a, uint64_t b) { return Rng(a ^ (b * 0x9e3779b97f4a7c15ull)).next(); }

/// Random input of `elems` elements for operator op: integers over their full range (so sums,
/// products and averages wrap); floats in [-1, 1], or with magnitude in [0.75, 1.5) for products
/// so that no partial product leaves the normal range of fp8.
inline std::vector<uint8_t> random_input(int t, int op, size_t elems, uint64_t seed) {
  std::vector<uint8_t> v(elems * dtype_size(t));
  Rng rng(seed);
  if (!dtype_is_float(t)) {
    size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
      uint64_t x = rng.next();
      std::memcpy(&v[i], &x, 8);
    }
    uint64_t x = rng.next();
    std::memcpy(&v[i], &x, v.size() - i);
    return v;
  }
  for (size_t i = 0; i < elems; i++) {
    double x = op == kProd ? (rng.next() & 1 ? -1 : 1) * rng.uniform(0.75, 1.5) : rng.uniform(-1, 1);
    store_float(t, v.data(), i, x);
  }
  return v;
}

/// A PreMulSum scalar (bits): any integer, or a float in [0.5, 2) rounded to the element type.
inline uint64_t random_scalar(int t, uint64_t seed) {
  Rng rng(seed);
  uint64_t bits = 0;
  if (!dtype_is_float(t)) {
    uint64_t x = rng.next();
    std::memcpy(&bits, &x, dtype_size(t));
  } else {
    store_float(t, &bits, 0, rng.uniform(0.5, 2.0));
  }
  return bits;
}

}  // namespace conformance
