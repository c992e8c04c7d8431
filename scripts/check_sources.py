#!/usr/bin/env python3
"""The house rules that a reader of the tree can check, checked over the tracked files.

  scripts/check_sources.py [--root DIR]

1. Notes. Every `Note [Title]` that code, build files, scripts or docs cite is defined exactly once:
   a comment (or docstring) line that starts with `Note [Title]`, alone or followed by a colon.
   Elsewhere a comment cites it ("See Note [Title]: what this code does of it"). A citation that
   names where the Note lives ("Note [Title] in path/file.hpp") names the file that defines it.
   bench/results/ is a dated log of measurements and is left as it was written.
2. Layers (docs/architecture.md, "Layers"). A folder includes memcomm headers only of itself and of
   the folders below it; allocator/core never includes the LibTorch adapter's header.
3. LibTorch. Only trainer/, the allocator's torch adapter and the tests and samples built on them
   include LibTorch's headers (torch/, ATen/, c10/, caffe2/). memcomm-tune's probes run training steps
   through the trainer's TrialRunner, whose header is free of LibTorch; python/'s C++ does not either
   (Note [No LibTorch in the bindings] in python/CMakeLists.txt).

Prints each breach as `file:line: what` and exits 1 when there is one, 0 when there is none, and 2
when the root is not a git checkout of memcomm.
"""
import argparse
import os
import re
import subprocess
import sys

CODE = re.compile(r"\.(c|cc|cpp|cu|h|hpp|py|sh|cmake|toml|md)$|(^|/)CMakeLists\.txt$")
SOURCE = re.compile(r"\.(c|cc|cpp|cu|h|hpp)$")
DEFINITION = re.compile(r'^\s*(?://+|#|\*|"""|-)?\s*Note \[([^\]]+)\](?::|\s*$)')
CITATION = re.compile(r"Note \[([^\]]+)\]")
EXAMPLE = "Title"  # the form's own placeholder, where a text explains what a Note is
# Files whose Note citations are data: this checker and its test.
NOTES_AS_DATA = ("scripts/check_sources.py", "tests/common/check_sources_test.py")
# "Note [Title] in some/file.ext" or "Note [Title] (some/file.ext)", after comment markers are joined.
CITATION_IN = re.compile(r"Note \[([^\]]+)\](?: in| \()\s*`?([\w./-]+\.(?:cpp|hpp|h|py|txt|cmake|cu))\b")
MEMCOMM_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]memcomm/(\w+)/([\w./]+)[>"]')
TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10|caffe2)/')

# The folder each memcomm/<name>/ include prefix belongs to.
OWNER = {"common": "common", "trace": "trace", "snapshot": "trace", "profiler": "profiler",
         "allocator": "allocator", "replay": "replay", "advisor": "advisor", "train": "trainer",
         "tuner": "tuner", "view": "viewer"}
# What each top folder may include, itself aside: docs/architecture.md's graph, closed transitively.
BELOW = {
    "common": set(),
    "trace": {"common"},
    "profiler": {"trace", "common"},
    "allocator": {"trace", "common"},
    "replay": {"allocator", "trace", "common"},
    "advisor": {"replay", "allocator", "trace", "common"},
    "trainer": {"profiler", "allocator", "trace", "common"},
    "tuner": {"trainer", "profiler", "allocator", "trace", "common"},
    "viewer": {"profiler", "trace", "common"},
    "tools": {"advisor", "replay", "allocator", "trace", "common"},
    "python": {"tuner", "trainer", "profiler", "allocator", "trace", "common"},
}
TORCH_ADAPTER_HEADERS = {"torch_allocator.hpp"}  # allocator/torch's public header
TORCH_ALLOWED = ("trainer/", "allocator/torch/", "tests/trainer/", "tests/torch_allocator/",
                 "tests/common/catch_with_torch.hpp", "tests/toolchain/test_torch.cpp", "samples/",
                 "bench/allocator_torch_cuda/")


def tracked_files(root):
    res = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if res.returncode != 0:
        print(f"check_sources.py: {root} is not a git checkout: {res.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    return [f for f in res.stdout.split("\n") if f]


def read(root, path):
    try:
        with open(os.path.join(root, path), encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def joined(text):
    """The text with line breaks and the comment markers after them folded into spaces, so a citation
    wrapped over two comment lines reads as one."""
    return re.sub(r"\s*\n\s*(?://+|#|\*)?\s*", " ", text)


def check_notes(texts):
    defined, where = {}, {}
    for path, text in texts.items():
        for number, line in enumerate(text.split("\n"), 1):
            m = DEFINITION.match(line)
            if m:
                defined.setdefault(m.group(1), set()).add(path)
                where.setdefault(m.group(1), []).append(f"{path}:{number}")
    breaches = [f"{places[1]}: Note [{name}] is defined again (first at {places[0]}); cite it there "
                f"(\"See Note [{name}]\")" for name, places in sorted(where.items()) if len(places) > 1]
    for path, text in texts.items():
        if path.startswith("bench/results/") or path in NOTES_AS_DATA:
            continue
        flat = joined(text)
        for name in sorted({m.group(1) for m in CITATION.finditer(flat)} - defined.keys() - {EXAMPLE}):
            breaches.append(f"{path}: cites Note [{name}], which no file defines")
        for m in CITATION_IN.finditer(flat):
            name, where = m.group(1), m.group(2)
            if name in defined and not any(d.endswith(where) for d in defined[name]):
                breaches.append(f"{path}: cites Note [{name}] in {where}; it is defined in "
                                f"{', '.join(sorted(defined[name]))}")
    return breaches


def check_includes(texts):
    breaches = []
    for path, text in texts.items():
        if not SOURCE.search(path):
            continue
        top = path.split("/", 1)[0]
        for n, line in enumerate(text.split("\n"), 1):
            m = MEMCOMM_INCLUDE.match(line)
            if m and top in BELOW:
                owner = OWNER.get(m.group(1))
                if owner is None:
                    breaches.append(f"{path}:{n}: includes memcomm/{m.group(1)}/, which no folder owns")
                elif owner != top and owner not in BELOW[top]:
                    breaches.append(f"{path}:{n}: {top}/ includes {owner}/'s memcomm/{m.group(1)}/{m.group(2)}, "
                                    f"a layer above it")
                elif path.startswith("allocator/core/") and m.group(2) in TORCH_ADAPTER_HEADERS:
                    breaches.append(f"{path}:{n}: allocator/core includes the LibTorch adapter's {m.group(2)}")
            if TORCH_INCLUDE.match(line) and not path.startswith(TORCH_ALLOWED):
                breaches.append(f"{path}:{n}: includes LibTorch outside trainer/ and the torch adapter")
    return breaches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the checkout to check (default: this script's)")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.root, ".git")) and not os.path.isfile(os.path.join(args.root, ".git")):
        print(f"check_sources.py: {args.root} is not a git checkout", file=sys.stderr)
        return 2
    texts = {}
    for path in tracked_files(args.root):
        if CODE.search(path) and not path.startswith("tests/fuzz/corpus/"):
            text = read(args.root, path)
            if text is not None:
                texts[path] = text
    breaches = check_notes(texts) + check_includes(texts)
    for b in breaches:
        print(b)
    print(f"check_sources.py: {len(texts)} files, {len(breaches)} breaches", file=sys.stderr)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
