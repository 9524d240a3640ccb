import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.core.errors import InputError
from copilot_cli.quant.scheme import check_finite, dequantize_all, dequantize_rows, quantize


def _table(rows=64, cols=128, seed=0):
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("bits", "levels"), [(8, 127), (4, 7)])
def test_error_is_at_most_half_a_step(bits, levels):
    table = _table()
    q = quantize(table, bits, 32)
    recon = dequantize_all(q)
    if bits == 8:
        step = q.scales.float().unsqueeze(1)
    else:
        step = q.scales.float().repeat_interleave(32, dim=1)
    assert ((recon - table).abs() <= step / 2 + 1e-6).all()
    assert q.q.dtype == (torch.int8 if bits == 8 else torch.uint8)


def test_dequantized_values_are_exactly_q_times_stored_scale():
    table = _table()
    q = quantize(table, 8)
    expected = q.q.float() * q.scales.float().unsqueeze(1)
    assert torch.equal(dequantize_all(q), expected)
    assert int(q.q.abs().max()) == 127  # the largest value of each row maps to ±127


def test_int4_packs_two_values_per_byte_and_unpacks_them_in_order():
    table = torch.tensor([[7.0, -7.0, 1.0, 0.0] * 8], dtype=torch.float32)
    q = quantize(table, 4, 32)
    assert q.q.shape == (1, 16)
    assert torch.equal(dequantize_rows(q, torch.tensor([0])), table)


def test_all_zero_rows_have_zero_scale_and_no_nan():
    table = _table()
    table[3] = 0
    for bits in (8, 4):
        q = quantize(table, bits, 32)
        recon = dequantize_all(q)
        assert torch.isfinite(recon).all()
        assert (recon[3] == 0).all()


def test_nan_and_inf_rows_are_named():
    table = _table()
    table[5, 2] = float("nan")
    table[9, 0] = float("inf")
    with pytest.raises(InputError, match="token ids 5, 9"):
        check_finite(table, "the embedding table")


def test_quantizing_does_not_touch_the_source_table():
    table = _table()
    before = table.clone()
    quantize(table, 8)
    quantize(table, 4, 32)
    assert torch.equal(table, before)


@pytest.mark.parametrize(("bits", "group"), [(3, 32), (4, 48), (16, 32)])
def test_unsupported_settings_list_the_choices(bits, group):
    with pytest.raises(InputError, match="choose one of"):
        quantize(_table(), bits, group)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5), st.sampled_from([32, 64]), st.floats(1e-3, 1e3), st.integers(0, 9999))
def test_rows_lookup_matches_full_dequantization(rows, group, magnitude, seed):
    table = _table(rows, 128, seed) * magnitude
    for bits in (8, 4):
        q = quantize(table, bits, group)
        ids = torch.tensor([[rows - 1, 0]])
        assert torch.equal(dequantize_rows(q, ids)[0], dequantize_all(q)[[rows - 1, 0]])
