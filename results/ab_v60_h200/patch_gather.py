import sys
p = sys.argv[1] + "/kernel_ext/csrc/verify_kernels.cuh"
s = open(p).read()
old = """  auto load_prefix_tile = [&](int kt, int stage, const int64_t* ids) {
    const int kbase = key_begin + kt * C::N_TILE;
    __nv_bfloat16* dst = sKV + stage * C::N_TILE * C::LD;
#pragma unroll
    for (int i = tid; i < C::N_TILE * kRowChunks; i += C::THREADS) {
      const int r = i / kRowChunks, ch = i - r * kRowChunks;
      const bool valid = kbase + r < key_end;
      const int64_t row = ids != nullptr ? ids[r] : row_id(kt, r);
      cp_async16(dst + r * C::LD + ch * 8, valid ? a.kv + row * a.skv + ch * 8 : a.kv, valid ? 16 : 0);
    }
  };"""
new = """  // Each row is copied by THREADS / N_TILE consecutive threads, whole 128-byte lines at a time: one row id and one
  // address per thread, the pieces at fixed offsets from it.
  static_assert(C::THREADS % C::N_TILE == 0 && kRowChunks % (C::THREADS / C::N_TILE) == 0, "gather layout");
  constexpr int kRowThreads = C::THREADS / C::N_TILE;
  auto load_prefix_tile = [&](int kt, int stage, const int64_t* ids) {
    const int r = tid / kRowThreads, c0 = tid % kRowThreads;
    const bool valid = key_begin + kt * C::N_TILE + r < key_end;
    const __nv_bfloat16* src = valid ? a.kv + (ids != nullptr ? ids[r] : row_id(kt, r)) * a.skv + c0 * 8 : a.kv;
    __nv_bfloat16* dst = sKV + (stage * C::N_TILE + r) * C::LD + c0 * 8;
#pragma unroll
    for (int j = 0; j < kRowChunks / kRowThreads; ++j)
      cp_async16(dst + j * kRowThreads * 8, valid ? src + j * kRowThreads * 8 : a.kv, valid ? 16 : 0);
  };"""
assert old in s, "gather"
s = s.replace(old, new)
open(p, "w").write(s)
