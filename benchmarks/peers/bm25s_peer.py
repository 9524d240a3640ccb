"""BM25 retrieval with bm25s 0.3.16 (in .venv-peers): the peer that ranks the same chunks by
BM25 alone.

stdin: {"corpus": [chunk texts], "queries": [texts], "k": n}
stdout: {"ranked": [[corpus index, ...] per query], "index_seconds": s, "query_seconds": s}
Tokenization is bm25s's own (lower-cased words, English stop words removed), its defaults.
"""

from __future__ import annotations

import json
import sys
import time

import bm25s


def main() -> None:
    job = json.load(sys.stdin)
    started = time.perf_counter()
    retriever = bm25s.BM25()
    corpus = bm25s.tokenize(job["corpus"], stopwords="en", show_progress=False)
    retriever.index(corpus, show_progress=False)
    indexed = time.perf_counter()
    k = min(job["k"], len(job["corpus"]))
    queries = bm25s.tokenize(job["queries"], stopwords="en", show_progress=False, return_ids=False)
    queries = [q or ["_"] for q in queries]  # a query of stop words only ranks nothing first
    ids, _scores = retriever.retrieve(queries, k=k, show_progress=False, n_threads=1)
    done = time.perf_counter()
    json.dump(
        {
            "ranked": [[int(i) for i in row] for row in ids],
            "index_seconds": indexed - started,
            "query_seconds": done - indexed,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
