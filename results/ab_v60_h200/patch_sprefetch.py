import sys
p = sys.argv[1] + "/kernel_ext/csrc/verify_kernels.cuh"
s = open(p).read()
old = """  static constexpr int MT_S = S_ROWS / 16, NT_S = S_COLS / 8;
"""
new = """  static constexpr int MT_S = S_ROWS / 16, NT_S = S_COLS / 8;
  static constexpr int S_CHAINS = MT_S * NT_S >= 4 ? 1 : 4 / (MT_S * NT_S);
  static constexpr int S_AHEAD = 2;
"""
assert old in s; s = s.replace(old, new)
i0 = s.index("    const __nv_bfloat16* sK = sKV + stage * C::N_TILE * C::LD;\n#pragma unroll\n    for (int mt = 0; mt < C::MT_S; ++mt)")
i1 = s.index("    // Scale, mask, partial row max.")
new_body = """    const __nv_bfloat16* sK = sKV + stage * C::N_TILE * C::LD;
    float chain[C::S_CHAINS][C::MT_S][C::NT_S][4];
#pragma unroll
    for (int c = 0; c < C::S_CHAINS; ++c)
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) chain[c][mt][nt][e] = 0.f;
    constexpr int KSTEPS = kDimQK / 16, RING = C::S_AHEAD + 1;
    uint32_t af[RING][C::MT_S][4], bfr[RING][C::NT_S][2];
    auto load_step = [&](int ks, int slot) {
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt)
        ldmatrix_x4(af[slot][mt], sQ + (ws_m * C::S_ROWS + mt * 16 + (lane & 15)) * C::LD + ks * 16 + (lane >> 4) * 8);
      if constexpr (C::NT_S % 2 == 0) {
#pragma unroll
        for (int np = 0; np < C::NT_S / 2; ++np) {
          uint32_t r[4];
          ldmatrix_x4(r, sK + (ws_n * C::S_COLS + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * C::LD + ks * 16 +
                             ((lane >> 3) & 1) * 8);
          bfr[slot][2 * np][0] = r[0]; bfr[slot][2 * np][1] = r[1];
          bfr[slot][2 * np + 1][0] = r[2]; bfr[slot][2 * np + 1][1] = r[3];
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt)
          ldmatrix_x2(bfr[slot][nt], sK + (ws_n * C::S_COLS + nt * 8 + (lane & 7)) * C::LD + ks * 16 + ((lane >> 3) & 1) * 8);
      }
    };
#pragma unroll
    for (int ks = 0; ks < C::S_AHEAD; ++ks) load_step(ks, ks);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if (ks + C::S_AHEAD < KSTEPS) load_step(ks + C::S_AHEAD, (ks + C::S_AHEAD) % RING);
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt)
          mma_bf16_16816(chain[ks % C::S_CHAINS][mt][nt], af[ks % RING][mt], bfr[ks % RING][nt][0], bfr[ks % RING][nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
      for (int nt = 0; nt < C::NT_S; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float sum = chain[0][mt][nt][e];
#pragma unroll
          for (int c = 1; c < C::S_CHAINS; ++c) sum += chain[c][mt][nt][e];
          s[mt][nt][e] = sum;
        }

"""
s = s[:i0] + new_body + s[i1:]
open(p, "w").write(s)
