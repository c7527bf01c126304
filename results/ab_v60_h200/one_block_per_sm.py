"""Measurement-only patch: config 2 reserves 120 KB per block, so one block per SM, as on sm_120 (100 KB per SM)."""
import sys
p = sys.argv[1] + "/kernel_ext/csrc/verify_api.cu"
s = open(p).read()
old = """template <class C, typename IdxT>
int prepare_main_kernel(int* blocks_per_sm) {
  CUTOVER_CUDA_CHECK(cudaFuncSetAttribute(verify_main_kernel<C, IdxT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          C::SMEM_BYTES),
                     "cudaFuncSetAttribute(max dynamic shared memory)");
  CUTOVER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, verify_main_kernel<C, IdxT>,
                                                                   C::THREADS, C::SMEM_BYTES),"""
new = """constexpr int kEmulatedSmallSmem = 120 * 1024;
template <class C> constexpr int launch_smem() { return std::is_same<C, SmallTiles>::value ? kEmulatedSmallSmem : C::SMEM_BYTES; }
template <class C, typename IdxT>
int prepare_main_kernel(int* blocks_per_sm) {
  CUTOVER_CUDA_CHECK(cudaFuncSetAttribute(verify_main_kernel<C, IdxT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          launch_smem<C>()),
                     "cudaFuncSetAttribute(max dynamic shared memory)");
  CUTOVER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, verify_main_kernel<C, IdxT>,
                                                                   C::THREADS, launch_smem<C>()),"""
assert old in s; s = s.replace(old, new)
old = "config == 2 ? SmallTiles::SMEM_BYTES : WgmmaTiles::SMEM_BYTES;"
assert s.count(old) == 1; s = s.replace(old, "config == 2 ? kEmulatedSmallSmem : WgmmaTiles::SMEM_BYTES;")
if "#include <type_traits>" not in s: s = "#include <type_traits>\n" + s
open(p, "w").write(s)
