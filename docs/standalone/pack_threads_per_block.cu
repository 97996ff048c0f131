// Stand-alone: threads per thread block of the flat pack kernel, every 2-D vector row (stride 512).
// Not part of the library: the measurement behind datatype-pack's `flat_threads` (docs/PERFORMANCE.md,
// "Pack: threads per thread block"). Build and run on the GPU: nvcc -O3 -arch=sm_90 -std=c++17 -o pack_threads_per_block pack_threads_per_block.cu && ./pack_threads_per_block
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
typedef unsigned long long u64;
template<int W> struct WT;
template<> struct WT<1> { typedef unsigned char t; };
template<> struct WT<2> { typedef unsigned short t; };
template<> struct WT<4> { typedef unsigned int t; };
template<> struct WT<8> { typedef unsigned long long t; };
template<> struct WT<16> { typedef int4 t; };
template<int B, int W, int T> __global__ void __launch_bounds__(T) ours(const unsigned char* __restrict__ in, unsigned char* __restrict__ out, u64 N) {
  typedef typename WT<W>::t word; constexpr u64 WPB = B / W;
  u64 i = (u64)blockIdx.x * T + threadIdx.x, step = (u64)gridDim.x * T;
  for (; i < N; i += step) *reinterpret_cast<word*>(out + i * W) = *reinterpret_cast<const word*>(in + (i / WPB) * 512ull + (i % WPB) * W);
}
template<int W> __global__ void naiveD(const unsigned char* src, unsigned char* dst, u64 words, u64 c0, u64 s0, u64 total) {
  typedef typename WT<W>::t word;
  u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; if (i >= total) return;
  u64 x = i % words, b = i / words; u64 off = (b % c0) * s0 + x * W;
  *(word*)(dst + i * W) = *(const word*)(src + off);
}
__global__ void fill(unsigned char* p, u64 n) { for (u64 i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) p[i] = (unsigned char)((i * 2654435761ull) >> 13); }
static cudaEvent_t e0, e1;
template<class F> float med(F f, int n) {
  for (int k = 0; k < 3; k++) f();
  std::vector<float> t;
  for (int k = 0; k < n; k++) { cudaEventRecord(e0); f(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms); }
  std::sort(t.begin(), t.end()); return t[n / 2];
}
unsigned char *src, *dst;
template<int B, int W, int T> float run(u64 packed) { u64 N = packed / W; return med([&] { ours<B, W, T><<<(unsigned)((N + T - 1) / T), T>>>(src, dst, N); }, packed > (1 << 20) ? 51 : 201); }
template<int B, int W> void row(u64 packed) {
  u64 N = packed / W;
  auto rate = [&](float ms) { return packed / (ms * 1e-3) / 1e9; };
  float tn = med([&] { naiveD<W><<<(unsigned)((N + 255) / 256), 256>>>(src, dst, B / W, packed / B, 512, N); }, packed > (1 << 20) ? 51 : 201);
  float a = run<B, W, 256>(packed), b = run<B, W, 512>(packed), c = run<B, W, 1024>(packed);
  printf("%4d B W=%2d %8llu B: naive %7.1f | 256 %7.1f  512 %7.1f  1024 %7.1f GB/s\n", B, W, packed, rate(tn), rate(a), rate(b), rate(c));
}
int main() {
  setvbuf(stdout, 0, _IONBF, 0);
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  const u64 SRC = (64ull << 20) * 512;
  cudaMalloc(&src, SRC); cudaMalloc(&dst, 64 << 20);
  fill<<<4096, 256>>>(src, SRC);
  for (u64 packed : {64ull << 20, 1ull << 20}) for (int rep = 0; rep < 2; rep++) {
    row<1, 1>(packed); row<2, 2>(packed); row<4, 4>(packed); row<8, 8>(packed); row<16, 16>(packed); row<32, 16>(packed); row<64, 16>(packed); row<128, 16>(packed); row<256, 16>(packed); row<512, 16>(packed);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
