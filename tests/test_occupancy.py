"""helpers.occupancy against hand-worked cases, the study's included."""

from __future__ import annotations

import pytest

from helpers.occupancy import SM_LIMITS, limits_for, occupancy, warps_limited_by_registers


def test_the_studys_example_116_registers_on_a_k40c_give_16_warps_not_17():
    # 116 * 32 = 3,712 registers a warp, allocated in units of 256: 3,840. Dividing the whole
    # file, 65,536 // 3,840 = 17 (the study's count, Section V-C); but each of the 4
    # sub-partitions of 16,384 holds 16,384 // 3,840 = 4 warps: 16 of the SM's 64.
    assert warps_limited_by_registers("K40c", 116) == 16
    assert warps_limited_by_registers("H100", 116) == 16


def test_register_sub_partitions_matter_only_where_the_division_leaves_a_remainder():
    # 64 registers: 2,048 a warp; 16,384 // 2,048 = 8 per part, 32 in all = 65,536 // 2,048.
    assert warps_limited_by_registers("K40c", 64) == 32
    # 72 registers: 2,304 a warp; whole file 28, per part 7 x 4 = 28; 80: 2,560, 25 vs 6 x 4 = 24.
    assert warps_limited_by_registers("K40c", 72) == 28
    assert warps_limited_by_registers("K40c", 80) == 24


def test_a_block_of_17_warps_at_116_registers_cannot_launch():
    # 17 * 3,840 = 65,280 registers fit the 65,536 a block may have, but the hardware counts a
    # block's warps rounded up to the 4 sub-partitions: 20 * 3,840 = 76,800 > 65,536.
    occ = occupancy("K40c", 544, 116)
    assert occ.active_blocks == 0 and occ.limiter == "registers"
    assert occupancy("K40c", 512, 116).active_warps == 16   # 16 warps: 61,440 registers


def test_k40c_128_threads_116_registers():
    # 4 warps a block; 16 warps fit by registers -> 4 blocks -> 16 warps = 25 %.
    occ = occupancy("K40c", 128, 116)
    assert occ.warps_per_block == 4
    assert occ.blocks_by == {"blocks": 16, "warps": 16, "registers": 4, "shared memory": 16}
    assert (occ.active_blocks, occ.active_warps) == (4, 16)
    assert occ.occupancy == pytest.approx(0.25) and occ.limiter == "registers"


def test_cuda_convnet2s_16_kb_of_shared_memory_limits_it_further():
    # Table II: 116 registers and 16 KB of shared memory per block. 48 KB // 16 KB = 3 blocks
    # of 4 warps: 12 of 64 warps = 18.75 %, inside the 14-22 % the study measured.
    occ = occupancy("K40c", 128, 116, 16 * 1024)
    assert occ.active_warps == 12 and occ.limiter == "shared memory"
    assert occ.occupancy == pytest.approx(12 / 64)
    assert "12 of 64 warps (18.8%), limited by shared memory" in str(occ)


def test_a_light_kernel_fills_an_h100():
    # 256 threads = 8 warps; 32 registers -> 1,024 a warp -> 64 warps by registers -> 8 blocks;
    # 64 // 8 = 8 blocks by warps: 64 of 64 warps, both limits at once.
    occ = occupancy("H100", 256, 32)
    assert occ.active_blocks == 8 and occ.occupancy == 1.0
    assert occ.limiter == "warps and registers"


def test_a100_large_blocks_and_shared_memory_with_its_reservation():
    # 1,024 threads with 64 registers: 2,048 a warp, 32 warps = the whole register file: 1 block.
    occ = occupancy("A100", 1024, 64)
    assert (occ.active_blocks, occ.active_warps, occ.limiter) == (1, 32, "registers")
    # 48 KB + the 1 KB reserved per block = 50,176 bytes; 164 KB // that = 3 blocks of 8 warps.
    occ = occupancy("A100", 256, 32, 48 * 1024)
    assert (occ.blocks_by["shared memory"], occ.active_warps) == (3, 24)
    assert occ.limiter == "shared memory" and occ.occupancy == pytest.approx(0.375)


def test_small_blocks_hit_the_block_limit():
    # 32 threads = 1 warp a block: 16 blocks of 1 warp on a K40c = 16 of 64 warps.
    occ = occupancy("K40c", 32, 16)
    assert occ.active_warps == 16 and occ.limiter == "blocks"
    # T4: 32 warps per SM at most, so one 1,024-thread block fills it.
    assert occupancy("T4", 1024, 32).occupancy == 1.0


def test_a_block_over_a_per_block_limit_cannot_launch():
    occ = occupancy("K40c", 1024, 128)  # 131,072 registers for one block
    assert occ.active_blocks == 0 and occ.limiter == "registers"
    occ = occupancy("T4", 128, 32, 65 * 1024)
    assert occ.active_blocks == 0 and occ.limiter == "shared memory"


def test_partial_warps_count_as_whole_warps():
    assert occupancy("V100", 33, 32).warps_per_block == 2


@pytest.mark.parametrize("args,match", [
    (("P100", 128, 32), "gpu must be one of"),
    (("K40c", 0, 32), "threads_per_block must be in 1..1024"),
    (("K40c", 1025, 32), "threads_per_block must be in 1..1024"),
    (("K40c", 128, 0), "regs_per_thread must be in 1..255"),
    (("K40c", 128, 256), "regs_per_thread must be in 1..255"),
    (("K40c", 128, 32, -1), "smem_per_block must be >= 0"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        occupancy(*args)


def test_names_and_compute_capabilities_agree():
    assert limits_for("H200") is limits_for("9.0") is SM_LIMITS["9.0"]
    with pytest.raises(ValueError, match="regs_per_thread"):
        warps_limited_by_registers("K40c", 300)
