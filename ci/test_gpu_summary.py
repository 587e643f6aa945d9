#!/usr/bin/env python3
"""Tests of ci/gpu_summary.py: python3 -m unittest discover -s ci -p 'test_*.py'

The summary is what a GPU session reads after its few minutes of device time; it must not lose
the ratio table because a library printed a line next to PyTorch's JSON.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ANCHOR = os.path.join(ROOT, "tests", "fixtures", "h200-firecracker-1gpu", "anchor.json")

NCCL_LINES = (
    "gpu-host:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
    "gpu-host:4242:4300 [0] NCCL WARN NET/Plugin: Could not find: libnccl-net.so\n"
)


def evidence(h2d, d2h, copy, verdict="pass", bf16=790.0):
    def metric(name, v, unit="GB/s"):
        return {"name": name, "subject": {"gpu": 0}, "unit": unit, "median": v,
                "min": v, "max": v, "samples": [v]}
    return {"verdict": verdict, "checks": [{
        "id": "host_bandwidth", "status": "pass", "summary": "", "duration_s": 1.0,
        "findings": [], "facts": [],
        "metrics": [metric("h2d", h2d), metric("d2h", d2h), metric("device_copy", copy)],
    }, {
        "id": "compute", "status": "pass", "summary": "", "duration_s": 1.0,
        "findings": [], "facts": [],
        "metrics": [metric("fp32_tflops", 50.5, "TFLOP/s"), metric("tf32_tflops", 380.0, "TFLOP/s"),
                    metric("bf16_tflops", bf16, "TFLOP/s")],
    }]}


# ci/torch_gemm.py's output, as measured on the GPU machine (made up beside the anchor's figures).
TORCH_GEMM = {"fp32_TFLOPs": 50.23, "tf32_TFLOPs": 385.0, "bf16_TFLOPs": 791.6,
              "bf16_fp32_out_TFLOPs": 780.0, "operand_range": 45,
              "bf16_narrow_TFLOPs": 850.0, "bf16_randn_TFLOPs": 760.5}


def run_summary(folder):
    """ci/gpu_summary.py on `folder`: its exit status and everything it printed."""
    p = subprocess.run([sys.executable, os.path.join(HERE, "gpu_summary.py"), folder],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def write(folder, name, text):
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


class SummaryReadsTorchOutput(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        for sub in ("report", "frozen", "train"):
            os.makedirs(os.path.join(self.dir, sub))
        self.write("inventory-json.out", json.dumps({"inventory": {"gpus": []}}))
        self.write("report/evidence.json", json.dumps(evidence(55.0, 55.0, 4200.0)))
        self.write("frozen/evidence.json", json.dumps({"verdict": "pass", "checks": []}))
        self.write("train/evidence.json", json.dumps({"checks": []}))
        self.write("suite.wall_s", "30.0")
        self.write("torch-gemm.out", json.dumps(TORCH_GEMM))
        with open(ANCHOR) as f:
            self.anchor = f.read()

    def write(self, name, text):
        write(self.dir, name, text)

    def summary(self):
        return run_summary(self.dir)

    def ratio_row(self, out, label):
        rows = [l for l in out.splitlines() if l.startswith(label)]
        self.assertEqual(len(rows), 1, out)
        return rows[0]

    def test_nccl_lines_around_the_json_keep_the_ratio_table(self):
        self.write("torch.out", NCCL_LINES + self.anchor + "\n" + NCCL_LINES)
        code, out = self.summary()
        self.assertNotIn("torch.out: not JSON", out)
        self.assertNotIn("could not read", out)
        row = self.ratio_row(out, "H2D pinned GB/s")
        self.assertIn("0.994", row)  # 55.0 / 55.32
        self.assertNotIn("MISSING", row)
        self.assertNotIn("MISSING", self.ratio_row(out, "device copy GB/s"))
        self.assertIn("4 line(s) besides its JSON", out)
        self.assertNotEqual(code, 2, out)

    def test_a_single_line_json_after_warnings_is_read(self):
        one_line = json.dumps(json.loads(self.anchor))
        self.write("torch.out", "UserWarning: something about TF32\n" + one_line + "\n")
        _, out = self.summary()
        self.assertNotIn("MISSING", self.ratio_row(out, "D2H pinned GB/s"))

    def test_output_without_json_is_reported_not_taken_as_figures(self):
        self.write("torch.out", NCCL_LINES + "Traceback (most recent call last):\n")
        code, out = self.summary()
        self.assertIn("torch.out: no JSON object in it", out)
        self.assertIn("MISSING", self.ratio_row(out, "H2D pinned GB/s"))
        self.assertEqual(code, 2, out)

    def test_a_slow_copy_misses_its_goal(self):
        self.write("report/evidence.json", json.dumps(evidence(50.0, 55.0, 4200.0)))
        self.write("torch.out", self.anchor)
        code, out = self.summary()
        self.assertIn("MISSED", self.ratio_row(out, "H2D pinned GB/s"))
        self.assertEqual(code, 1, out)


    def test_gemm_rates_are_held_to_pytorch_like_for_like(self):
        self.write("torch.out", self.anchor)
        _, out = self.summary()
        # bf16 against PyTorch's bf16 GEMM with fp32 output (as nodecert's): 790 / 780.
        row = self.ratio_row(out, "bf16 GEMM TFLOP/s")
        self.assertIn("1.013", row)
        self.assertIn("met", row)
        self.assertIn("met", self.ratio_row(out, "fp32 GEMM TFLOP/s"))
        self.assertIn("0.987", self.ratio_row(out, "TF32 GEMM TFLOP/s"))
        # The data's share of the rate, shown beside the goals.
        row = self.ratio_row(out, "bf16 by data")
        for part in ("-2..2 850.0,", "-45..45 791.6,", "randn 760.5"):
            self.assertIn(part, row)

    def test_fp8_exactness_by_range_is_shown(self):
        self.write("torch.out", self.anchor)
        gemm = dict(TORCH_GEMM, fp8_r2_TFLOPs=1390.0, fp8_r2_wrong_elements=0,
                    fp8_r16_TFLOPs=1350.5, fp8_r16_wrong_elements=12)
        self.write("torch-gemm.out", json.dumps(gemm))
        _, out = self.summary()
        row = self.ratio_row(out, "fp8 by range")
        self.assertIn("-2..2 1390.0 (0 wrong), -16..16 1350.5 (12 wrong)", row)
        self.assertNotIn("-8..8", row)

    def test_a_slow_gemm_misses_its_goal_and_a_missing_one_is_said(self):
        self.write("torch.out", self.anchor)
        self.write("report/evidence.json", json.dumps(evidence(55.3, 55.2, 4300.0, bf16=700.0)))
        code, out = self.summary()
        self.assertIn("MISSED", self.ratio_row(out, "bf16 GEMM TFLOP/s"))
        self.assertEqual(code, 1, out)
        self.write("torch-gemm.out", json.dumps({"fp32_TFLOPs": 50.0, "bf16_TFLOPs": 790.0}))
        code, out = self.summary()
        # No figures by data (an older torch_gemm.py, or a dry run): no line for them.
        self.assertNotIn("bf16 by data", out)
        self.assertIn("MISSING", self.ratio_row(out, "TF32 GEMM TFLOP/s"))
        self.assertEqual(code, 1, out)


class SummaryOfTheFirstRealRun(unittest.TestCase):
    """What ci/gpu-smoke.sh left on the lent H200 on 2026-12-04 (tests/fixtures/h200-nodecert-run)."""

    def test_the_real_folder_gives_that_days_ratios_and_misses(self):
        real = os.path.join(ROOT, "tests", "fixtures", "h200-nodecert-run")
        code, out = run_summary(real)
        rows = {l[:22].strip(): l for l in out.splitlines()}
        for label, ratio in [("H2D pinned GB/s", "1.003"), ("device copy GB/s", "1.005"),
                             ("fp32 GEMM TFLOP/s", "1.004"), ("TF32 GEMM TFLOP/s", "1.009"),
                             ("bf16 GEMM TFLOP/s", "1.037"), ("MLP train step ms", "0.999")]:
            self.assertIn(ratio, rows[label], out)
            self.assertIn("met", rows[label], out)
        # That day had no PyTorch bf16 step, and the suite took 72.8 s against its 60 s.
        self.assertIn("MISSING", rows["bf16 MLP step ms"], out)
        # nor an fp8 GEMM of nodecert's (cuBLASLt came later); PyTorch's was measured.
        self.assertIn("1399.6", rows["fp8 GEMM TFLOP/s"], out)
        self.assertIn("MISSING", rows["fp8 GEMM TFLOP/s"], out)
        self.assertIn("MISSED", rows["h200-vm-1 suite s"], out)
        self.assertNotIn("DRY RUN", out)
        self.assertEqual(code, 1, out)


class SummaryGoalsOnARealFolder(unittest.TestCase):
    """The first real run's folder, completed with what its call did not have yet (PyTorch's bf16
    step, the first-contact steps) and a suite under 60 s: every goal met, then one at a time
    missed."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        real = os.path.join(ROOT, "tests", "fixtures", "h200-nodecert-run")
        shutil.copytree(real, self.dir, dirs_exist_ok=True)
        self.write("suite.wall_s", "30.0")
        self.reference(2.6)
        for name, code in [("health", 0), ("sign", 0), ("verify", 0), ("gate", 0), ("no-gpu", 3)]:
            self.write(f"{name}.rc", f"{code}\n")
        self.fp8(1380.0)

    def fp8(self, tflops):
        """nodecert's fp8 rate in the suite's evidence (None: not measured, as that day)."""
        path = os.path.join(self.dir, "report", "evidence.json")
        with open(path) as f:
            ev = json.load(f)
        check = next(c for c in ev["checks"] if c["id"] == "compute")
        check["metrics"] = [m for m in check["metrics"] if m["name"] != "fp8_tflops"]
        if tflops is not None:
            check["metrics"].append({"name": "fp8_tflops", "subject": {"gpu": 0},
                                     "unit": "TFLOP/s", "median": tflops, "min": tflops,
                                     "max": tflops, "samples": [tflops]})
        with open(path, "w") as f:
            json.dump(ev, f)

    def write(self, name, text):
        write(self.dir, name, text)

    def reference(self, step_ms, precision="bf16"):
        line = {"method": "data", "gpus": 1, "precision": precision, "step_ms": step_ms}
        # After torchrun's own warning lines, as it prints them.
        self.write("torch-partition-bf16.out", "W1204 torchrun: warning\n" + json.dumps(line) + "\n")

    def summary(self):
        code, out = run_summary(self.dir)
        return code, out, {l[:44].strip(): l for l in out.splitlines()}

    def row(self, rows, label):
        hits = [l for k, l in rows.items() if k.startswith(label)]
        self.assertEqual(len(hits), 1, f"{label}: {hits}")
        return hits[0]

    def test_every_goal_met_exits_0(self):
        code, out, rows = self.summary()
        row = self.row(rows, "bf16 MLP step ms")
        self.assertIn("1.021", row)  # 2.65 / 2.6
        self.assertIn("met", row)
        for label in ("health-check", "sign the", "verify it", "verify --require-pass",
                      "CUDA_VISIBLE_DEVICES"):
            self.assertTrue(self.row(rows, label).endswith("met"), out)
        # fp8 against that day's torch._scaled_mm (the only fp8 reference in the folder).
        row = self.row(rows, "fp8 GEMM TFLOP/s")
        self.assertIn("0.986", row)  # 1380 / 1399.6
        self.assertIn("met", row)
        self.assertEqual(code, 0, out)

    def test_the_profile_names_the_model_and_suite_expected(self):
        # The real H200 folder read as if the smoke run had expected an H100: the model misses,
        # and the suite's rows carry the profile's suite name.
        self.write("profile.json", json.dumps({"model_seen": "NVIDIA H100 80GB HBM3",
                                               "model": "NVIDIA H100 80GB HBM3",
                                               "suite": "h100-vm-1"}))
        code, out, rows = self.summary()
        self.assertIn("inventory against the lent NVIDIA H100 80GB HBM3", out)
        model = self.row(rows, "model ")
        self.assertIn("want NVIDIA H100 80GB HBM3", model)
        self.assertTrue(model.endswith("MISSED"), model)
        self.assertTrue(self.row(rows, "suite h100-vm-1").endswith("ok"), out)
        self.assertIn("met", self.row(rows, "h100-vm-1 suite s"))
        self.assertEqual(code, 1, out)
        # A model no profile knows: held to its frozen suite, said, and the model row missed.
        self.write("profile.json", json.dumps({"model_seen": "NVIDIA B200", "model": None,
                                               "suite": None}))
        code, out, rows = self.summary()
        self.assertIn("no profile expects the GPU model 'NVIDIA B200'", out)
        self.assertTrue(self.row(rows, "model ").endswith("MISSED"), out)
        self.assertIn("met", self.row(rows, "frozen suite s"))
        self.assertEqual(code, 1, out)
        # The H200's profile, as the script writes it: every goal met.
        self.write("profile.json", json.dumps({"model_seen": "NVIDIA H200",
                                               "model": "NVIDIA H200", "suite": "h200-vm-1"}))
        code, out, rows = self.summary()
        self.assertEqual(code, 0, out)

    def test_a_rehearsal_on_another_gpu_shows_its_ratios_but_is_not_held_to_them(self):
        self.fp8(1300.0)  # 0.929 of PyTorch's: a missed goal
        self.write("profile.json", json.dumps({"model_seen": "NVIDIA H200", "model": "NVIDIA H200",
                                               "suite": "h200-vm-1", "ratios_are_goals": False}))
        code, out, rows = self.summary()
        self.assertIn("NOT GOALS here", out)
        self.assertIn("MISSED", self.row(rows, "fp8 GEMM TFLOP/s"))
        self.assertEqual(code, 0, out)
        # The same as goals: missed.
        self.write("profile.json", json.dumps({"model_seen": "NVIDIA H200", "model": "NVIDIA H200",
                                               "suite": "h200-vm-1", "ratios_are_goals": True}))
        code, out, _ = self.summary()
        self.assertNotIn("NOT GOALS", out)
        self.assertEqual(code, 1, out)

    def test_fp8_slow_or_not_measured_misses(self):
        self.fp8(1300.0)
        code, out, rows = self.summary()
        self.assertIn("MISSED", self.row(rows, "fp8 GEMM TFLOP/s"))
        self.assertEqual(code, 1, out)
        self.fp8(None)
        code, out, rows = self.summary()
        self.assertIn("MISSING", self.row(rows, "fp8 GEMM TFLOP/s"))
        self.assertEqual(code, 1, out)
        # The like-for-like reference wins over the bf16-output one when both are there.
        self.fp8(1380.0)
        with open(os.path.join(self.dir, "torch-gemm.out")) as f:
            gemm = json.loads(f.read().strip().splitlines()[-1])
        gemm["fp8_fp32_out_TFLOPs"] = 1500.0
        self.write("torch-gemm.out", json.dumps(gemm))
        code, out, rows = self.summary()
        self.assertIn("0.920", self.row(rows, "fp8 GEMM TFLOP/s"))
        self.assertEqual(code, 1, out)

    def test_a_bf16_step_over_1_1x_pytorchs_misses(self):
        self.reference(2.3)
        code, out, rows = self.summary()
        self.assertIn("MISSED", self.row(rows, "bf16 MLP step ms"))
        self.assertEqual(code, 1, out)

    def test_a_reference_of_another_recipe_or_none_is_missing(self):
        # PyTorch's autocast is not nodecert's recipe: no reference.
        self.reference(2.3, precision="autocast")
        code, out, rows = self.summary()
        self.assertIn("MISSING", self.row(rows, "bf16 MLP step ms"))
        self.assertEqual(code, 1, out)
        self.reference(0)
        code, out, rows = self.summary()
        self.assertIn("MISSING", self.row(rows, "bf16 MLP step ms"))
        self.assertEqual(code, 1, out)

    def test_a_failed_bf16_run_is_failed_not_missing(self):
        path = os.path.join(self.dir, "train-bf16", "evidence.json")
        with open(path) as f:
            ev = json.load(f)
        next(c for c in ev["checks"] if c["id"] == "training")["status"] = "fail"
        with open(path, "w") as f:
            json.dump(ev, f)
        code, out, rows = self.summary()
        self.assertIn("FAILED (the bf16 run: fail)", self.row(rows, "bf16 MLP step ms"))
        self.assertEqual(code, 1, out)

    def test_a_hidden_gpu_read_as_a_failed_node_or_an_unsigned_report_misses(self):
        self.write("no-gpu.rc", "1\n")
        code, out, rows = self.summary()
        self.assertTrue(self.row(rows, "CUDA_VISIBLE_DEVICES").endswith("MISSED"), out)
        self.assertEqual(code, 1, out)
        self.write("no-gpu.rc", "3\n")
        os.remove(os.path.join(self.dir, "sign.rc"))
        code, out, rows = self.summary()
        self.assertTrue(self.row(rows, "sign the").endswith("MISSING"), out)
        self.assertEqual(code, 1, out)

    def test_a_gate_that_exits_otherwise_than_the_run_misses(self):
        # The run passed (0): a gate that says partial (7), or never ran, lies about it.
        self.write("gate.rc", "7\n")
        code, out, rows = self.summary()
        self.assertTrue(self.row(rows, "verify --require-pass").endswith("MISSED"), out)
        self.assertEqual(code, 1, out)
        os.remove(os.path.join(self.dir, "gate.rc"))
        code, out, rows = self.summary()
        self.assertTrue(self.row(rows, "verify --require-pass").endswith("MISSING"), out)
        self.assertEqual(code, 1, out)


if __name__ == "__main__":
    unittest.main()
