// The cost of the lookups a put makes after the acquire of its wait (window and peer tables, source load).
// Built and run on the 2×H100 machine (NV18, one process, both GPUs): nvcc -O3 -arch=sm_90 table_loads.cu -o t && ./t
// Output: results.txt beside this file.
#include <cstdio>
#include <cstdint>
typedef uint64_t U;
__device__ __forceinline__ U lda(const U*p){U v;asm volatile("ld.acquire.sys.global.u64 %0,[%1];":"=l"(v):"l"(p):"memory");return v;}
__device__ __forceinline__ U ldr(const U*p){U v;asm volatile("ld.relaxed.sys.global.u64 %0,[%1];":"=l"(v):"l"(p):"memory");return v;}
__global__ void pp(int me,U*ms,const U*tbl,U*src,int n,int m){
 U h0=tbl[2+(1-me)],w0=tbl[0];
 for(int i=0;i<n;i++){
  if(me==1){if(m==4){while(ldr(ms)<i+1);lda(ms);}else while(lda(ms)<i+1);}
  U heap,w;
  if(m==0){w=tbl[0];heap=tbl[2+(1-me)];}else if(m==1){w=__ldg(tbl);heap=__ldg(tbl+2+(1-me));}else{w=w0;heap=h0;}
  U v=m==3?i:*(volatile U*)((char*)src+w);
  *(volatile U*)(heap+w+8)=v;
  asm volatile("red.release.sys.global.add.u64 [%0],1;"::"l"((U*)heap):"memory");
  if(me==0){if(m==4){while(ldr(ms)<i+1);lda(ms);}else while(lda(ms)<i+1);}
 }
}
int main(){
 U*s[2];U*t[2];cudaStream_t st[2];
 for(int g=0;g<2;g++){cudaSetDevice(g);cudaDeviceEnablePeerAccess(1-g,0);cudaMalloc(&s[g],4096);cudaMalloc(&t[g],64);cudaStreamCreate(&st[g]);}
 for(int g=0;g<2;g++){U h[4]={256,0,(U)s[0],(U)s[1]};cudaSetDevice(g);cudaMemcpy(t[g],h,32,cudaMemcpyHostToDevice);}
 const char*nm[]={"table loads after the wait (plain)","table loads via ld.global.nc","addresses in registers","registers, no source load","registers, relaxed poll + acquire"};
 int n=20000;
 for(int rep=0;rep<2;rep++)for(int m=0;m<5;m++){
  for(int g=0;g<2;g++){cudaSetDevice(g);cudaMemset(s[g],0,8);cudaDeviceSynchronize();}
  cudaEvent_t a,b;cudaSetDevice(0);cudaEventCreate(&a);cudaEventCreate(&b);
  cudaSetDevice(1);pp<<<1,1,0,st[1]>>>(1,s[1],t[1],s[1],n,m);
  cudaSetDevice(0);cudaEventRecord(a,st[0]);pp<<<1,1,0,st[0]>>>(0,s[0],t[0],s[0],n,m);cudaEventRecord(b,st[0]);
  cudaEventSynchronize(b);float ms;cudaEventElapsedTime(&ms,a,b);cudaSetDevice(1);cudaDeviceSynchronize();
  printf("%-36s %.3f us one-way %s\n",nm[m],ms*1e3/(2.0*n),cudaGetErrorString(cudaGetLastError()));
 }}
