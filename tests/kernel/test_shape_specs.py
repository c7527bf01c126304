"""Shapes given as text (`kernel_ext.bench.parse_shapes`, for the benchmark scripts and the plugin overhead
benchmark's --shapes): parsed in order, and a clear error for a bad one."""
import pytest

from cutover.plugin.bench_overhead import main
from kernel_ext.bench import parse_shapes


def test_shapes_parse_in_order():
    assert parse_shapes("16,8,1,65536  8,16,1,4096 8,1,1,0") == [(16, 8, 1, 65536), (8, 16, 1, 4096), (8, 1, 1, 0)]


@pytest.mark.parametrize("text", ["8,8,1", "8,8,1,4096,2", "8,x,1,4096", "8,8,0,4096", "8,-8,1,4096", "  "])
def test_bad_shape_names_the_entry_and_the_form(text):
    with pytest.raises(ValueError, match="H,T,BATCH,PREFIX|no shape given"):
        parse_shapes(text)


def test_overhead_cli_rejects_a_bad_shape_before_touching_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--shapes", "8,8,1"])
    assert exit_info.value.code == 2
    assert "'8,8,1' is not H,T,BATCH,PREFIX" in capsys.readouterr().err
