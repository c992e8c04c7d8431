#!/usr/bin/env python3
"""scripts/check_sources.py finds each kind of breach it promises, and passes a tree without one.

Each case writes a small git checkout in a temporary folder and runs the script on it.
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check_sources.py")

CLEAN = {
    "trace/src/fold.cpp": "// Note [One fold]\n// Why there is one.\n#include \"memcomm/common/bytes.hpp\"\n",
    "viewer/model/view.cpp": "// Uses the fold (Note [One fold] in fold.cpp).\n#include <memcomm/trace/event.hpp>\n",
    "trainer/src/step.cpp": "#include <torch/torch.h>\n#include <memcomm/profiler/recorder.hpp>\n",
    "docs/architecture.md": "Design reasons sit in `Note [Title]` comments, such as Note [One fold].\n",
}


def run_on(files):
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as fh:
                fh.write(text)
        subprocess.run(["git", "init", "-q", root], check=True)
        subprocess.run(["git", "-C", root, "add", "-A"], check=True)
        res = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
        return res.returncode, res.stdout


class CheckSources(unittest.TestCase):
    def test_a_clean_tree_passes(self):
        rc, out = run_on(CLEAN)
        self.assertEqual((rc, out), (0, ""))

    def test_a_citation_of_a_note_no_file_defines(self):
        rc, out = run_on({**CLEAN, "replay/main.cpp": "int f();  // see Note [Nowhere\n// defined]\n"})
        self.assertEqual(rc, 1)
        self.assertIn("replay/main.cpp: cites Note [Nowhere defined], which no file defines", out)

    def test_a_note_defined_twice(self):
        rc, out = run_on({**CLEAN, "replay/main.cpp": "// Note [One fold]: what this file does of it\n"})
        self.assertEqual(rc, 1)
        self.assertIn("Note [One fold] is defined again (first at ", out)
        rc, out = run_on({**CLEAN, "replay/main.cpp": "// See Note [One fold]: what this file does of it\n"})
        self.assertEqual((rc, out), (0, ""))

    def test_a_note_a_docstring_bullet_defines_is_a_definition(self):
        # A Python docstring's "- Note [X]: ..." bullet defines X: a test comment "# Note [X]: ..." was taken
        # for the definition, and a citation naming the module that defines it was called wrong.
        bullet = {**CLEAN, "python/hooks.py": '"""Phases.\n\n- Note [A bullet]: what it says.\n"""\n',
                  "trace/src/x.cpp": "// (Note [A bullet] in python/hooks.py)\n"}
        self.assertEqual(run_on(bullet), (0, ""))
        rc, out = run_on({**bullet, "tests/test_x.py": "# Note [A bullet]: the test of it\n"})
        self.assertEqual(rc, 1)
        self.assertIn("Note [A bullet] is defined again (first at ", out)

    def test_a_citation_that_names_the_wrong_file(self):
        rc, out = run_on({**CLEAN, "replay/main.cpp": "// (Note [One fold] in other.hpp)\n"})
        self.assertEqual(rc, 1)
        self.assertIn("cites Note [One fold] in other.hpp; it is defined in trace/src/fold.cpp", out)

    def test_an_include_from_a_layer_above(self):
        rc, out = run_on({**CLEAN, "trace/src/draw.cpp": "#include <memcomm/view/timeline.hpp>\n"})
        self.assertEqual(rc, 1)
        self.assertIn("trace/src/draw.cpp:1: trace/ includes viewer/'s memcomm/view/timeline.hpp", out)

    def test_the_allocator_core_including_the_torch_adapter(self):
        rc, out = run_on({**CLEAN, "allocator/core/x.cpp": "#include \"memcomm/allocator/torch_allocator.hpp\"\n"})
        self.assertEqual(rc, 1)
        self.assertIn("allocator/core/x.cpp:1: allocator/core includes the LibTorch adapter", out)

    def test_libtorch_outside_the_trainer_and_the_adapter(self):
        rc, out = run_on({**CLEAN, "viewer/app/x.cpp": "  #  include <ATen/ATen.h>\n"})
        self.assertEqual(rc, 1)
        self.assertIn("viewer/app/x.cpp:1: includes LibTorch outside trainer/ and the torch adapter", out)

    def test_a_folder_that_is_not_a_checkout_is_a_usage_error(self):
        with tempfile.TemporaryDirectory() as root:
            res = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
        self.assertEqual(res.returncode, 2)
        self.assertIn("not a git checkout", res.stderr)


if __name__ == "__main__":
    unittest.main()
