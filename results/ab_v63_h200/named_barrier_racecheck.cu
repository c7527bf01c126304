// Does compute-sanitizer racecheck follow named barriers (barrier.sync id, count)? Two correct kernels with the
// verify kernel's hand-off between roles: warps 0-3 write P[kt & 1] after block barrier kt, warps 4-7 read
// P[(kt - 1) & 1] after it (each role reaching the block barrier from its own instruction), then an epilogue
// through one __syncthreads. `named` adds one named barrier per tile in each role (ids 1 and 2, 128 threads), as
// the verify kernel has; it orders nothing the hand-off needs. `shared_loop` (mode 2) is the same hand-off with
// both roles in one loop, so that every thread reaches each block barrier from the same instruction. Added in the
// twenty-second session: mode 3 is mode 0 with the block barrier out of line (each role keeps its own loop, every
// thread reaches the barrier at the one instruction of that function); mode 4 is mode 2 with barrier.sync 0 (not
// aligned) in place of __syncthreads. Build: nvcc -arch=sm_90a -lineinfo -o X this.cu; run:
// compute-sanitizer --tool racecheck X MODE (MODE 0 to 4).
#include <cstdio>
#include <cstdlib>

__device__ __forceinline__ void block_barrier() { asm volatile("barrier.sync 0;\n" ::: "memory"); }
__device__ __noinline__ void block_barrier_out_of_line() { asm volatile("barrier.sync 0;\n" ::: "memory"); }
__device__ __forceinline__ void group_barrier(int id) { asm volatile("barrier.sync %0, 128;\n" ::"r"(id) : "memory"); }

__global__ void hand_off(float* out, int tiles, bool named, bool out_of_line) {
  __shared__ float p[2][128];
  __shared__ float sums[128];
  const int t = threadIdx.x;
  if (t < 128) {
    for (int kt = 0; kt <= tiles; ++kt) {
      if (out_of_line) block_barrier_out_of_line(); else block_barrier();
      if (kt < tiles) {
        if (named) group_barrier(1);
        p[kt & 1][t] = kt + 1.f;
      }
    }
    sums[t] = tiles;
  } else {
    float acc = 0.f;
    for (int kt = 0; kt <= tiles; ++kt) {
      if (out_of_line) block_barrier_out_of_line(); else block_barrier();
      if (kt > 0) acc += p[(kt - 1) & 1][t - 128];
      if (named) group_barrier(2);
    }
    out[t - 128] = acc;
  }
  __syncthreads();
  if (t >= 128) out[t - 128] += sums[t - 128];
}

__global__ void shared_loop(float* out, int tiles, bool aligned) {
  __shared__ float p[2][128];
  __shared__ float sums[128];
  const int t = threadIdx.x;
  float acc = 0.f;
  for (int kt = 0; kt <= tiles; ++kt) {
    if (aligned) __syncthreads(); else block_barrier();
    if (t < 128) {
      if (kt < tiles) p[kt & 1][t] = kt + 1.f;
    } else if (kt > 0) {
      acc += p[(kt - 1) & 1][t - 128];
    }
  }
  if (t < 128) sums[t] = tiles;
  __syncthreads();
  if (t >= 128) out[t - 128] = acc + sums[t - 128];
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0;
  const bool named = mode == 1;
  const int tiles = 8;
  float* out;
  cudaMalloc(&out, 128 * sizeof(float));
  if (mode == 2 || mode == 4) shared_loop<<<4, 256>>>(out, tiles, mode == 2);
  else hand_off<<<4, 256>>>(out, tiles, named, mode == 3);
  float host[128];
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  const float want = tiles * (tiles + 1) / 2.f + tiles;
  int wrong = 0;
  for (float v : host) wrong += v != want;
  printf("mode %d: %d of 128 sums wrong (want %.0f)\n", mode, wrong, want);
  return wrong != 0;
}
