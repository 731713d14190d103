# Adds clock64 stamps (thread 0 of blocks 0/1, launches 50/51, printf) to the executor: experiment only.
p='device/kernels/executor.cu'
s=open(p).read()
def rep(a,b):
    global s
    assert a in s, a
    s=s.replace(a,b,1)
rep('''namespace {
''','''namespace {
__shared__ long long prof_t[64];
__shared__ unsigned prof_n;
__device__ __forceinline__ void P(){ if(threadIdx.x==0 && prof_n<64){ prof_t[prof_n++]=clock64(); } }
''')
rep('''  bool ok = p.pushed;
  if (threadIdx.x == 0 && ok) {''','''  P();
  bool ok = p.pushed;
  if (threadIdx.x == 0 && ok) {''')
rep('''  if (!__syncthreads_and(ok)) return false;
  bool moved = true;''','''  if (!__syncthreads_and(ok)) return false;
  P();
  bool moved = true;''')
rep('''  if (!__syncthreads_and(moved)) return false;
  if (threadIdx.x == 0) {
    if ((op.flags & EXEC_SIGNAL_PORT) != 0) {''','''  P();
  if (!__syncthreads_and(moved)) return false;
  P();
  if (threadIdx.x == 0) {
    if ((op.flags & EXEC_SIGNAL_PORT) != 0) {''')
rep('''  extern __shared__ ExecOp shared_ops[];
  const uint32_t b = blockIdx.x;''','''  extern __shared__ ExecOp shared_ops[];
  if (threadIdx.x == 0) { prof_n = 0; }
  P();
  const uint64_t g0 = ptx::globaltimer_ns();
  const uint32_t b = blockIdx.x;''')
rep('''    cached = __syncthreads_and(load_cached_rows(c, outputs, launch));''','''    P();
    cached = __syncthreads_and(load_cached_rows(c, outputs, launch));
    P();''')
rep('''  if (b < plan_blocks &&
      !run_plan(''','''  P();
  if (b < plan_blocks &&
      !run_plan(''')
rep('''  if (threadIdx.x == 0) {
    // Packets need no exit fence''','''  P();
  if (threadIdx.x == 0 && (b == 0 || b == 1) && (launch == 50 || launch == 51)) {
    const uint64_t g1 = ptx::globaltimer_ns();
    char line[512]; int n = 0;
    for (unsigned i = 1; i < prof_n && n < 480; ++i) {
      long long d = prof_t[i] - prof_t[0];
      int v = (int)d; char tmp[12]; int k = 0; if (v == 0) tmp[k++] = '0'; while (v > 0 && k < 11) { tmp[k++] = '0' + v % 10; v /= 10; }
      line[n++] = ' '; while (k > 0) line[n++] = tmp[--k];
    }
    line[n] = 0;
    printf("PROF rank %u block %u launch %llu ns %llu cycles:%s\\n", c.rank, b, (unsigned long long)launch, (unsigned long long)(g1 - g0), line);
  }
  if (threadIdx.x == 0) {
    // Packets need no exit fence''')
open(p,'w').write(s)
