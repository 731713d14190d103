// weft's gin.cuh on a hand-made DevCommHandle (2 ranks, one per GPU, LSA): the ping-pong of
// ping_pong.cu and a put stream of put_block slices (512-thread blocks, a signal per block).
// Built twice from the repository root: against device/include of main at 09c4991 (V=main) and
// against a copy whose gin_copy is this branch's (V=branch):
//   nvcc -O3 -arch=sm_90 -std=c++17 -I <include dir> -DV='"main"' api_put_stream.cu
// Output: results.txt beside this file.
#include "weft/gin.cuh"
#include <cstdio>
using namespace weft;typedef uint64_t U;
__global__ void pp(DevCommHandle h,uint32_t n){Gin g(h);GinTeam w=gin_team_world(h);
for(uint32_t i=0;i<n;++i){if(h.rank==1&&!g.wait_signal(0,i+1))return;if(!g.put(w,1-h.rank,0,8,0,0,8,gin_signal_inc(0)))return;if(h.rank==0&&!g.wait_signal(0,i+1))return;}}
__global__ void ps(DevCommHandle h,U bytes,uint32_t n){U sl=((bytes+gridDim.x-1)/gridDim.x+15)&~15ull,b=blockIdx.x*sl;if(b>=bytes)return;U len=bytes-b<sl?bytes-b:sl;
Gin g(h);if(h.rank==0){for(uint32_t i=0;i<n;++i)g.put_block(gin_team_world(h),1,0,b,0,b,len,gin_signal_inc(blockIdx.x));if(!threadIdx.x)g.flush();}else if(!threadIdx.x)g.wait_signal(blockIdx.x,n);}
int main(){DevCommHandle h[2]={};U hp[2],W=64<<20;cudaStream_t st[2];void*p;
for(int g=0;g<2;g++){cudaSetDevice(g);cudaDeviceEnablePeerAccess(1-g,0);cudaMalloc(&p,W+4096);hp[g]=(U)p;cudaStreamCreate(&st[g]);}
for(int g=0;g<2;g++){cudaSetDevice(g);U wn[2]={4096,W};DevCommHandle&x=h[g];
cudaMalloc(&p,64);cudaMemcpy(p,wn,16,cudaMemcpyHostToDevice);x.windows=(U)p;
cudaMalloc(&p,64);cudaMemcpy(p,hp,16,cudaMemcpyHostToDevice);x.peer_heaps=(U)p;
cudaMalloc(&p,4096);x.state=(U)p;cudaMalloc(&p,256);cudaMemset(p,0,256);x.wait.error=(U)p;x.heap=hp[g];
x.wait.timeout_ns=5000000000ull;x.rank=g;x.world=2;x.signals=16;x.signal_slots=16;x.window_count=1;x.lsa_size=2;x.lsa_rank=g;}
for(int m=0;m<5;m++){U by[]={8,16<<20,16<<20,64<<20,1<<20};int gr[]={1,1,16,16,16};uint32_t n=m?16:20000;
for(int g=0;g<2;g++){cudaSetDevice(g);cudaMemset((void*)hp[g],0,4096);cudaMemset((void*)h[g].state,0,4096);cudaDeviceSynchronize();}
cudaEvent_t a,b;cudaSetDevice(0);cudaEventCreate(&a);cudaEventCreate(&b);cudaSetDevice(1);if(m)ps<<<gr[m],512,0,st[1]>>>(h[1],by[m],n);else pp<<<1,1,0,st[1]>>>(h[1],n);
cudaSetDevice(0);cudaEventRecord(a,st[0]);if(m)ps<<<gr[m],512,0,st[0]>>>(h[0],by[m],n);else pp<<<1,1,0,st[0]>>>(h[0],n);cudaEventRecord(b,st[0]);cudaEventSynchronize(b);float ms;cudaEventElapsedTime(&ms,a,b);
cudaSetDevice(1);cudaDeviceSynchronize();if(m)printf("%s stream %llu B x%d blocks %.1f GB/s\n",V,by[m],gr[m],by[m]*n/ms/1e6);else printf("%s ping-pong %.3f us\n",V,ms/40);}}
