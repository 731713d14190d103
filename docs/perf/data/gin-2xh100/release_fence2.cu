// More orderings for the same ping-pong as release_fence.cu.
// Built and run on the 2×H100 machine (NV18, one process, both GPUs): nvcc -O3 -arch=sm_90 release_fence2.cu -o f2 && ./f2
// Output: results.txt beside this file.
#include <cstdio>
#include <cstdint>
typedef uint64_t U;
__device__ __forceinline__ U lda(const U*p){U v;asm volatile("ld.acquire.sys.global.u64 %0,[%1];":"=l"(v):"l"(p):"memory");return v;}
__global__ void pp(int me,U*ms,U*ps,U*pd,int n,int m){
 for(int i=0;i<n;i++){
  if(me==1)while(lda(ms)<i+1);
  if(m==0){*(volatile U*)pd=i;asm volatile("fence.sc.sys;red.relaxed.sys.global.add.u64 [%0],1;"::"l"(ps):"memory");}
  else if(m==1){*(volatile U*)pd=i;asm volatile("red.release.gpu.global.add.u64 [%0],1;"::"l"(ps):"memory");}
  else if(m==2){asm volatile("red.release.sys.global.add.u64 [%0],1;"::"l"(ps):"memory");}
  else if(m==3){*(volatile U*)pd=i;asm volatile("fence.acq_rel.gpu;red.relaxed.gpu.global.add.u64 [%0],1;"::"l"(ps):"memory");}
  else {*(volatile U*)pd=i;asm volatile("red.relaxed.sys.global.add.u64 [%0],1;"::"l"(ps):"memory");}
  if(me==0)while(lda(ms)<i+1);
 }
}
int main(){
 U*s[2];U*d[2];cudaStream_t st[2];
 for(int g=0;g<2;g++){cudaSetDevice(g);cudaDeviceEnablePeerAccess(1-g,0);cudaMalloc(&s[g],256);cudaMalloc(&d[g],256);cudaStreamCreate(&st[g]);}
 const char*nm[]={"u64 + fence.sc.sys + red.relaxed","u64 + red.release.gpu","red.release.sys, no data","u64 + fence.gpu + red.relaxed.gpu","u64 + red.relaxed.sys (no order)"};
 int n=20000;
 for(int rep=0;rep<2;rep++)for(int m=0;m<5;m++){
  for(int g=0;g<2;g++){cudaSetDevice(g);cudaMemset(s[g],0,256);cudaDeviceSynchronize();}
  cudaEvent_t a,b;cudaSetDevice(0);cudaEventCreate(&a);cudaEventCreate(&b);
  cudaSetDevice(1);pp<<<1,1,0,st[1]>>>(1,s[1],s[0],d[0]+1,n,m);
  cudaSetDevice(0);cudaEventRecord(a,st[0]);pp<<<1,1,0,st[0]>>>(0,s[0],s[1],d[1]+1,n,m);cudaEventRecord(b,st[0]);
  cudaEventSynchronize(b);float ms;cudaEventElapsedTime(&ms,a,b);
  cudaSetDevice(1);cudaDeviceSynchronize();
  printf("%-36s %.3f us one-way\n",nm[m],ms*1e3/(2.0*n));
 }
 return 0;}
