// The same ping-pong through the whole API, built against gin.cuh as is (the Gin object in local memory, 400 bytes) and with its proxy state cut to one word (0 bytes): VARIANT names the build.
// Built and run on the 2×H100 machine (NV18, one process, both GPUs): nvcc -O3 -arch=sm_90 -std=c++17 -I <include dir> -DVARIANT='"..."' api_local.cu
// Output: results.txt beside this file.
#include "weft/gin.cuh"
#include <cstdio>
using namespace weft;
__global__ void pp(DevCommHandle h,uint32_t n){
 Gin gin(h);GinTeam w=gin_team_world(h);uint32_t p=1-h.rank;
 for(uint32_t i=0;i<n;++i){
  if(h.rank==1&&!gin.wait_signal(0,i+1))return;
  if(!gin.put(w,p,0,8,0,0,8,gin_signal_inc(0)))return;
  if(h.rank==0&&!gin.wait_signal(0,i+1))return;}}
int main(){
 DevCommHandle h[2]={};uint64_t heap[2];cudaStream_t st[2];
 for(int g=0;g<2;g++){cudaSetDevice(g);cudaDeviceEnablePeerAccess(1-g,0);void*p;cudaMalloc(&p,1<<20);heap[g]=(uint64_t)p;cudaStreamCreate(&st[g]);}
 for(int g=0;g<2;g++){cudaSetDevice(g);void*t,*s,*e;uint64_t win[2]={4096,4096};
  cudaMalloc(&t,64);cudaMemcpy(t,win,16,cudaMemcpyHostToDevice);h[g].windows=(uint64_t)t;
  cudaMalloc(&t,64);cudaMemcpy(t,heap,16,cudaMemcpyHostToDevice);h[g].peer_heaps=(uint64_t)t;
  cudaMalloc(&s,4096);cudaMalloc(&e,256);cudaMemset(e,0,256);h[g].state=(uint64_t)s;h[g].heap=heap[g];
  h[g].wait.error=(uint64_t)e;h[g].wait.timeout_ns=5000000000ull;h[g].wait.rank=g;h[g].rank=g;h[g].world=2;
  h[g].signals=1;h[g].signal_slots=1;h[g].window_count=1;h[g].lsa_size=2;h[g].lsa_rank=g;}
 uint32_t n=20000;
 for(int r=0;r<3;r++){
  for(int g=0;g<2;g++){cudaSetDevice(g);cudaMemset((void*)heap[g],0,1<<20);cudaMemset((void*)h[g].state,0,4096);cudaDeviceSynchronize();}
  cudaEvent_t a,b;cudaSetDevice(0);cudaEventCreate(&a);cudaEventCreate(&b);
  cudaSetDevice(1);pp<<<1,1,0,st[1]>>>(h[1],n);
  cudaSetDevice(0);cudaEventRecord(a,st[0]);pp<<<1,1,0,st[0]>>>(h[0],n);cudaEventRecord(b,st[0]);
  cudaEventSynchronize(b);float ms;cudaEventElapsedTime(&ms,a,b);cudaSetDevice(1);cudaDeviceSynchronize();
  uint32_t code;cudaMemcpy(&code,(void*)h[1].wait.error,4,cudaMemcpyDeviceToHost);
  printf("%s: %.3f us one-way (err %u, %s)\n",VARIANT,ms*1e3/(2.0*n),code,cudaGetErrorString(cudaGetLastError()));}}
