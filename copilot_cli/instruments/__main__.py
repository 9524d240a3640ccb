"""`python -m copilot_cli.instruments [--force]`: fetch and prepare the real instruments."""

from __future__ import annotations

import sys

from copilot_cli.instruments import prepare, root


def main() -> None:
    stamp = prepare(force="--force" in sys.argv[1:], log=lambda line: print(line, flush=True))
    print(f"ready in {root()}: SmolLM2-135M ({stamp['smollm2_fingerprint'][:16]}), tokenizers")
    for name, matched in sorted(stamp["tokenizers"].items()):
        print(f"  {name:16} {matched} llama.cpp reference texts tokenized identically")


if __name__ == "__main__":
    main()
