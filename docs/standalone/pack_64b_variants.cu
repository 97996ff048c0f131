// Stand-alone: 64 B blocks at stride 512, 64 MiB packed: thread-block size, L2 prefetch size, issue rate.
// Not part of the library: the measurement behind datatype-pack's `flat_threads` (docs/PERFORMANCE.md,
// "Pack: threads per thread block"). Build and run on the GPU: nvcc -O3 -arch=sm_90 -std=c++17 -o pack_64b_variants pack_64b_variants.cu && ./pack_64b_variants
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
typedef unsigned long long u64;
template<int B, int T, int PF> __global__ void __launch_bounds__(T) ours(const unsigned char* __restrict__ in, unsigned char* __restrict__ out, u64 N) {
  constexpr u64 WPB = B / 16;
  u64 i = (u64)blockIdx.x * T + threadIdx.x, step = (u64)gridDim.x * T;
  for (; i < N; i += step) {
    u64 off = (i / WPB) * 512ull + (i % WPB) * 16;
    const void* p = in + off; int4 v;
    if (PF == 0) v = *reinterpret_cast<const int4*>(p);
    else if (PF == 64) asm volatile("ld.global.nc.L2::64B.v4.s32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (PF == 128) asm volatile("ld.global.nc.L2::128B.v4.s32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (PF == 256) asm volatile("ld.global.nc.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (PF == 1) asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    *reinterpret_cast<int4*>(out + i * 16) = v;
  }
}
// naive without the b % c0 division (runtime words only)
__global__ void naiveH(const unsigned char* src, unsigned char* dst, u64 words, u64 total) {
  u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; if (i >= total) return;
  u64 x = i % words, b = i / words;
  *(int4*)(dst + i * 16) = *(const int4*)(src + b * 512 + x * 16);
}
__global__ void naiveD(const unsigned char* src, unsigned char* dst, u64 words, u64 c0, u64 s0, u64 total) {
  u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; if (i >= total) return;
  u64 x = i % words, b = i / words; u64 off = (b % c0) * s0 + x * 16;
  *(int4*)(dst + i * 16) = *(const int4*)(src + off);
}
__global__ void fill(unsigned char* p, u64 n) { for (u64 i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) p[i] = (unsigned char)((i * 2654435761ull) >> 13); }
static cudaEvent_t e0, e1;
template<class F> float med(F f) {
  for (int k = 0; k < 3; k++) f();
  std::vector<float> t;
  for (int k = 0; k < 51; k++) { cudaEventRecord(e0); f(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms); }
  std::sort(t.begin(), t.end()); return t[25];
}
const u64 PACKED = 64ull << 20;
unsigned char *src, *dst, *ref;
std::vector<unsigned char> ha(PACKED), hb(PACKED);
bool same() { cudaMemcpy(ha.data(), ref, PACKED, cudaMemcpyDeviceToHost); cudaMemcpy(hb.data(), dst, PACKED, cudaMemcpyDeviceToHost); cudaMemset(dst, 0, PACKED); return ha == hb; }
double rate(float ms) { return PACKED / (ms * 1e-3) / 1e9; }
template<int B, int T, int PF> double run() { u64 N = PACKED / 16; float t = med([&] { ours<B, T, PF><<<(unsigned)((N + T - 1) / T), T>>>(src, dst, N); }); bool ok = same(); if (!ok) printf("MISMATCH T=%d PF=%d\n", T, PF); return rate(t); }
template<int B> void row() {
  u64 N = PACKED / 16;
  float td = med([&] { naiveD<<<(unsigned)(N / 256), 256>>>(src, dst, B / 16, PACKED / B, 512, N); }); cudaMemcpy(ref, dst, PACKED, cudaMemcpyDeviceToDevice);
  float th = med([&] { naiveH<<<(unsigned)(N / 256), 256>>>(src, dst, B / 16, N); }); bool okh = same();
  printf("B=%d naiveD %.1f naiveH(no c0 div) %.1f %s\n", B, rate(td), rate(th), okh ? "ok" : "MISMATCH");
  printf("  threads/block:  64 %.1f  128 %.1f  256 %.1f  512 %.1f  1024 %.1f\n", run<B, 64, 0>(), run<B, 128, 0>(), run<B, 256, 0>(), run<B, 512, 0>(), run<B, 1024, 0>());
  printf("  256 thr, L2 prefetch: 64B %.1f  128B %.1f  256B %.1f  L1::no_allocate %.1f\n", run<B, 256, 64>(), run<B, 256, 128>(), run<B, 256, 256>(), run<B, 256, 1>());
}
int main() {
  setvbuf(stdout, 0, _IONBF, 0);
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  const u64 SRC = PACKED / 16 * 512;
  cudaMalloc(&src, SRC); cudaMalloc(&dst, PACKED); cudaMalloc(&ref, PACKED);
  fill<<<4096, 256>>>(src, SRC);
  for (size_t g : {0, 32, 64, 128}) {
    if (g) { cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, g); size_t v; cudaDeviceGetLimit(&v, cudaLimitMaxL2FetchGranularity); printf("== MaxL2FetchGranularity %zu\n", v); }
    else { size_t v; cudaDeviceGetLimit(&v, cudaLimitMaxL2FetchGranularity); printf("== default MaxL2FetchGranularity %zu\n", v); }
    row<64>(); row<32>(); row<128>();
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
