// Copy rate by grid size (512 threads a block), one or four 16-byte words in flight per thread.
// Built and run on the 2×H100 machine (NV18, one process, both GPUs): nvcc -O3 -arch=sm_90 copy_rate_blocks.cu -o c && ./c
// Output: results.txt beside this file.
#include <cstdio>
template<int K>__global__ void cp(uint4*d,const uint4*s,size_t n){
 size_t t=blockIdx.x*(size_t)blockDim.x+threadIdx.x,st=(size_t)gridDim.x*blockDim.x;size_t i=t;
 for(;i+(K-1)*st<n;i+=K*st){uint4 v[K];
#pragma unroll
  for(int k=0;k<K;k++)v[k]=s[i+k*st];
#pragma unroll
  for(int k=0;k<K;k++)d[i+k*st]=v[k];}
 for(;i<n;i+=st)d[i]=s[i];}
int main(){size_t B=64<<20;uint4*s,*d,*l;cudaSetDevice(1);cudaMalloc(&d,B);cudaSetDevice(0);cudaDeviceEnablePeerAccess(1,0);cudaMalloc(&s,B);cudaMalloc(&l,B);
 cudaEvent_t a,b;cudaEventCreate(&a);cudaEventCreate(&b);size_t n=B/16;
 for(int dst=0;dst<2;dst++)for(int K=1;K<=4;K*=4)for(int g:{1,2,8,16,32,64,132}){uint4*D=dst?d:l;
  for(int r=0;r<2;r++){cudaEventRecord(a);if(K==1)cp<1><<<g,512>>>(D,s,n);else cp<4><<<g,512>>>(D,s,n);cudaEventRecord(b);cudaEventSynchronize(b);}
  float ms;cudaEventElapsedTime(&ms,a,b);printf("%s unroll %d blocks %3d (512 thr): %7.1f GB/s\n",dst?"peer":"local",K,g,B/ms/1e6);}
 printf("%s\n",cudaGetErrorString(cudaGetLastError()));}
