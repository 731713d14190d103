// The emulated NIC's delivery from the host: a kernel raises a host-mapped flag, the host answers with CUDA stream operations on a non-blocking stream (as the copy-engine transport does), the kernel waits for the token; 3000 round trips per mode.
// Built and run on the 2×H100 machine (NV18, one process, both GPUs): nvcc -O3 -arch=sm_90 host_delivery.cu -o h -lcuda && ./h
// Output: results.txt beside this file.
#include <cstdio>
#include <cstdint>
#include <chrono>
#include <cuda.h>
typedef unsigned long long U;
__global__ void k(volatile U*hf,const U*tok,int n){for(int i=0;i<n;i++){*hf=i+1;__threadfence_system();U v;do{asm volatile("ld.acquire.sys.global.u64 %0,[%1];":"=l"(v):"l"(tok):"memory");}while(v<(U)i+1);}}
int main(){
 cudaSetDevice(1);U*rsrc;cudaMalloc(&rsrc,64);cudaSetDevice(0);cudaDeviceEnablePeerAccess(1,0);
 U*tok,*dst;cudaMalloc(&tok,64);cudaMalloc(&dst,64);
 volatile U*hf;cudaHostAlloc((void**)&hf,64,cudaHostAllocMapped);volatile unsigned*gate;cudaHostAlloc((void**)&gate,64,cudaHostAllocMapped);
 U*dhf;cudaHostGetDevicePointer((void**)&dhf,(void*)hf,0);unsigned*dg;cudaHostGetDevicePointer((void**)&dg,(void*)gate,0);
 cudaStream_t s0,s1;cudaStreamCreateWithFlags(&s0,cudaStreamNonBlocking);cudaStreamCreateWithFlags(&s1,cudaStreamNonBlocking);
 const char*nm[]={"writeValue64 only","memcpy 8B peer + writeValue64","gated (pre-issued waitValue32 host gate)","memcpy 8B peer + writeValue + eventRecord"};
 int n=3000;cudaEvent_t ev;cudaEventCreateWithFlags(&ev,cudaEventDisableTiming);
 for(int rep=0;rep<2;rep++)for(int m=0;m<4;m++){
  cudaMemset(tok,0,64);*hf=0;*gate=0;cudaDeviceSynchronize();
  auto pre=[&](int i){cuStreamWaitValue32((CUstream)s1,(CUdeviceptr)dg,i+1,CU_STREAM_WAIT_VALUE_GEQ);cudaMemcpyAsync(dst,rsrc,8,cudaMemcpyDeviceToDevice,s1);cuStreamWriteValue64((CUstream)s1,(CUdeviceptr)tok,i+1,0);};
  if(m==2)pre(0);
  k<<<1,1,0,s0>>>(dhf,tok,n);
  auto t0=std::chrono::steady_clock::now();
  for(int i=0;i<n;i++){while(*hf<(U)i+1);
   if(m==2){*gate=i+1;if(i+1<n)pre(i+1);}
   else{if(m)cudaMemcpyAsync(dst,rsrc,8,cudaMemcpyDeviceToDevice,s1);cuStreamWriteValue64((CUstream)s1,(CUdeviceptr)tok,i+1,0);if(m==3)cudaEventRecord(ev,s1);}}
  cudaStreamSynchronize(s0);double us=std::chrono::duration<double,std::micro>(std::chrono::steady_clock::now()-t0).count();
  printf("%-44s round trip %.2f us (%s)\n",nm[m],us/n,cudaGetErrorString(cudaGetLastError()));
 }return 0;}
