// weft's gin.cuh (main at 09c4991) on a hand-made DevCommHandle: the LSA ping-pong of ping_pong.cu, and with each half (wait, put) replaced by its bare PTX.
// Built and run on the 2×H100 machine (NV18, one process, both GPUs): nvcc -O3 -arch=sm_90 -std=c++17 -I device/include api_cost.cu -o a && ./a (from the repository root)
// Output: results.txt beside this file.
#include "weft/gin.cuh"
#include <cstdio>
using namespace weft;
__device__ bool W(Gin&g,const DevCommHandle&h,int m,uint64_t t){if(m&1)return g.wait_signal(0,t);
 const uint64_t*s=(const uint64_t*)h.heap;while(ptx::ld_acquire_sys(s)<t);return true;}
__device__ bool P(Gin&g,const DevCommHandle&h,int m,uint64_t dst,const uint64_t*src){if(m&2)return g.put(gin_team_world(h),1-h.rank,0,8,0,0,8,gin_signal_inc(0));
 *(volatile uint64_t*)(dst+4096+8)=*(const volatile uint64_t*)src;ptx::red_add_release_sys((uint64_t*)dst,1);return true;}
__global__ void pp(DevCommHandle h,uint32_t n,int m){
 Gin gin(h);uint64_t dst=((const uint64_t*)h.peer_heaps)[1-h.rank];const uint64_t*src=(const uint64_t*)(h.heap+4096);
 for(uint32_t i=0;i<n;++i){
  if(h.rank==1&&!W(gin,h,m,i+1))return;
  if(!P(gin,h,m,dst,src))return;
  if(h.rank==0&&!W(gin,h,m,i+1))return;}}
int main(){
 DevCommHandle h[2]={};uint64_t heap[2];cudaStream_t st[2];
 for(int g=0;g<2;g++){cudaSetDevice(g);cudaDeviceEnablePeerAccess(1-g,0);void*p;cudaMalloc(&p,1<<20);heap[g]=(uint64_t)p;cudaStreamCreate(&st[g]);}
 for(int g=0;g<2;g++){cudaSetDevice(g);void*t,*s,*e;uint64_t win[2]={4096,4096};
  cudaMalloc(&t,64);cudaMemcpy(t,win,16,cudaMemcpyHostToDevice);h[g].windows=(uint64_t)t;
  cudaMalloc(&t,64);cudaMemcpy(t,heap,16,cudaMemcpyHostToDevice);h[g].peer_heaps=(uint64_t)t;
  cudaMalloc(&s,4096);cudaMalloc(&e,256);cudaMemset(e,0,256);h[g].state=(uint64_t)s;h[g].heap=heap[g];
  h[g].wait.error=(uint64_t)e;h[g].wait.timeout_ns=5000000000ull;h[g].wait.rank=g;h[g].rank=g;h[g].world=2;
  h[g].signals=1;h[g].signal_slots=1;h[g].window_count=1;h[g].lsa_size=2;h[g].lsa_rank=g;}
 uint32_t n=20000;const char*nm[]={"manual wait, manual put","API wait, manual put","manual wait, API put","API wait, API put"};
 for(int r=0;r<2;r++)for(int m=0;m<4;m++){
  for(int g=0;g<2;g++){cudaSetDevice(g);cudaMemset((void*)heap[g],0,1<<20);cudaMemset((void*)h[g].state,0,4096);cudaDeviceSynchronize();}
  cudaEvent_t a,b;cudaSetDevice(0);cudaEventCreate(&a);cudaEventCreate(&b);
  cudaSetDevice(1);pp<<<1,1,0,st[1]>>>(h[1],n,m);
  cudaSetDevice(0);cudaEventRecord(a,st[0]);pp<<<1,1,0,st[0]>>>(h[0],n,m);cudaEventRecord(b,st[0]);
  cudaEventSynchronize(b);float ms;cudaEventElapsedTime(&ms,a,b);cudaSetDevice(1);cudaDeviceSynchronize();
  printf("%-26s %.3f us one-way (%s)\n",nm[m],ms*1e3/(2.0*n),cudaGetErrorString(cudaGetLastError()));}}
