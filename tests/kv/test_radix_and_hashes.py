import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.kv.format import block_hashes, segment_hash
from copilot_cli.kv.radix import RadixTree

sequences = st.lists(
    st.lists(st.integers(0, 5), min_size=1, max_size=12), min_size=1, max_size=8, unique_by=tuple
)


@settings(max_examples=200, deadline=None)
@given(sequences)
def test_every_prefix_is_its_chain_and_tokens_are_stored_once(seqs):
    tree = RadixTree()
    for i, seq in enumerate(seqs):
        tree.insert(f"p{i}", seq)
    for i, seq in enumerate(seqs):
        chain = tree.end_of(f"p{i}").chain()
        assert [t for s in chain for t in s.token_ids] == seq
        assert all(s.parent is None or s.parent.end == s.start for s in chain)
    trie_nodes = {tuple(seq[: n + 1]) for seq in seqs for n in range(len(seq))}
    assert tree.total_tokens() == len(trie_nodes)
    seen = set()
    for segment in tree.segments():
        assert segment.parent is tree.root or id(segment.parent) in seen
        seen.add(id(segment))


def test_block_hashes_chain_and_skip_partial_blocks():
    ids = list(range(40))
    hashes = block_hashes(ids, 16, "model-a")
    assert len(hashes) == 2  # 8 trailing tokens: no hash yet
    changed = block_hashes([99] + ids[1:], 16, "model-a")
    assert changed[0] != hashes[0] and changed[1] != hashes[1]  # chained
    later = block_hashes(ids[:16] + [99] + ids[17:], 16, "model-a")
    assert later[0] == hashes[0] and later[1] != hashes[1]
    assert block_hashes(ids, 16, "model-b") != hashes


def test_hashes_are_the_same_in_another_process():
    code = (
        "from copilot_cli.kv.format import block_hashes, segment_hash\n"
        "print(block_hashes(list(range(64)), 16, 'fp')[-1], "
        "segment_hash('p', [1, 2, 3], 'fp', 'float32'))"
    )
    out = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
        ).stdout
        for seed in (1, 2)
    ]
    assert out[0] == out[1]
    assert out[0].split() == [
        block_hashes(list(range(64)), 16, "fp")[-1],
        segment_hash("p", [1, 2, 3], "fp", "float32"),
    ]
