//! Every kind of invalid suite gets an error naming file, line and column, and exit 2.

mod util;
use predicates::prelude::*;
use util::Env;

/// (suite text, expected "line:column", words the message must contain)
const BROKEN: &[(&str, &str, &str)] = &[
    // TOML syntax
    ("format_version = 1\nname = \"x\"\n[node\ngpu_count = 8\n", "3:6", ""),
    // missing format version
    ("name = \"x\"\n", "1:1", "missing `format_version`"),
    // future format version
    ("format_version = 7\nname = \"x\"\n", "1:1", "format_version = 7 is not supported"),
    // unknown key at top level and nested
    ("format_version = 1\nname = \"x\"\ncolour = 1\n", "3:1", "unknown field `colour`"),
    ("format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\ngpu_modle = \"H100\"\n", "5:1", "unknown field `gpu_modle`"),
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = 48, warn_belw = 52 }\n",
        "4:26",
        "unknown field `warn_belw`",
    ),
    // MIG is off or accepted ("on" is not a mode nodecert measures)
    ("format_version = 1\nname = \"x\"\n[node]\nmig = \"on\"\n", "4:1", "unknown variant `on`, expected `off` or `any`"),
    // another process is an error or shown, nothing else
    (
        "format_version = 1\nname = \"x\"\n[checks.health]\nother_processes = \"ignore\"\n",
        "4:1",
        "unknown variant `ignore`, expected `error` or `shown`",
    ),
    // unknown collective
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_sum]\n", "3:20", "unknown variant `all_sum`"),
    // inside a collective's table: located at the key, the collective named in the path
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_gather]\nfactor = 2\nmin_sise = \"8B\"\n",
        "5:1",
        "checks.collective.all_gather.min_sise: unknown field `min_sise`",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\n\nfactor = \"2\"\n",
        "5:1",
        "checks.collective.all_reduce.factor: invalid type",
    ),
    // wrong type
    ("format_version = 1\nname = \"x\"\n[node]\ngpu_count = \"eight\"\n", "4:1", "node.gpu_count"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nsize = \"12 parsecs\"\n", "4:1", "unknown size unit"),
    // missing value
    ("format_version = 1\n[node]\ngpu_count = 8\n", "1:1", "missing field `name`"),
    ("format_version = 1\nname = \"x\"\n[topology]\nnvlink_pairs = [{ a = 0, b = 1 }]\n", "4:17", "missing field `links`"),
    // impossible values
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = -5.0 }\n",
        "4:9",
        "fail_below must be a number from 0 to 100000, got -5",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\n[topology]\nnvlink_pairs = [{ a = 0, b = 1, links = 12 }, { a = 2, b = 9, links = 12 }]\n",
        "6:56",
        "GPU index 9 is out of range: the node has 8 GPUs",
    ),
    // a typical value: positive, and its fraction only beside it
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nread = { typical = -3.0 }\n",
        "4:10",
        "typical must be a number > 0",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nread = { fail_below = 3.0, typical_fraction = 0.8 }\n",
        "4:28",
        "typical_fraction needs typical",
    ),
    // topology relations: GPU indexes in range, each GPU once, known path classes, pairs once
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\n[topology]\nsocket_groups = [[0, 1, 2, 3], [4, 5, 6, 8]]\n",
        "6:42",
        "GPU index 8 is out of range: the node has 8 GPUs",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 8\n[topology]\nnuma_groups = [[0, 1], [1, 2]]\n",
        "6:25",
        "GPU 1 is in more than one place of numa_groups",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 2\n[topology]\ncpu_affinity = [\"0-7\", \"8-x\"]\n",
        "6:24",
        "topology.cpu_affinity[1]: '8-x' is not a CPU list",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 4\n[topology]\ncpu_affinity = [\"0-7\"]\n",
        "6:1",
        "cpu_affinity lists 1 GPUs but node.gpu_count is 4",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 4\n[topology]\ncpu_affinity_groups = [[0, 4]]\n",
        "6:28",
        "GPU index 4 is out of range: the node has 4 GPUs",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 4\n[topology]\npcie_paths = [{ a = 0, b = 1, path = \"PCI\" }]\n",
        "6:31",
        "unknown variant `PCI`",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 4\n[topology]\npcie_paths = [{ a = 0, b = 1, path = \"PIX\" }, { a = 1, b = 0, path = \"SYS\" }]\n",
        "6:47",
        "the pair 1-0 is listed twice",
    ),
    // per-path-class peer limits: known classes only, located at the class; limits checked inside
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth.by_path.PCI]\nread = { fail_below = 3.0 }\n",
        "3:31",
        "unknown path class `PCI`, expected one of PIX, PXB, PHB, NODE, SYS or NV1 to NV32",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nby_path = { SYS = { read = { fail_below = 3.0 } }, NV0 = {} }\n",
        "4:52",
        "unknown path class `NV0`",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth.by_path.SYS]\nreed = { fail_below = 3.0 }\n",
        "4:1",
        "checks.p2p_bandwidth.by_path.SYS.reed: unknown field `reed`",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth.by_path.SYS]\nread = { fail_below = -1.0 }\n",
        "4:10",
        "checks.p2p_bandwidth.by_path.SYS.read.fail_below: fail_below must be a number from 0 to 100000",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = 48.0, warn_below = 40.0 }\n",
        "4:28",
        "warn_below (40) is below fail_below (48)",
    ),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmin_size = \"1GiB\"\nmax_size = \"1MiB\"\n", "5:1", "max_size (1 MiB) is smaller than min_size (1 GiB)"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmin_busbw_gbps = { \"8 parsecs\" = 3 }\n", "4:20", "must be a message size"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\noutlier_pct = 150\n", "4:1", "outlier_pct must be between 0 and 100"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_latency]\nremeasure = 9\n", "4:1", "remeasure must be 0 to 5 more attempts, got 9"),
    ("format_version = 1\nname = \"x\"\n[nccl]\naccept = { NCCL_DEBUG = \"INFO\" }\n", "4:12", "nccl.accept.NCCL_DEBUG: NCCL_DEBUG = \"INFO\" changes no figure: nothing to accept"),
    ("format_version = 1\nname = \"x\"\n[nccl]\naccept = { NCCL_ALGO = \"Ring\", \"CUDA.X\" = \"1\" }\n", "4:32", "'CUDA.X' is not an NCCL setting (NCCL_ and capitals, digits, _)"),
    // The entry for a configuration file nodecert could not read is unknown, never accepted.
    ("format_version = 1\nname = \"x\"\n[nccl]\naccept = { \"NCCL_*\" = \"unknown: /etc/nccl.conf could not be read (Permission denied)\" }\n", "4:12", "'NCCL_*' is not an NCCL setting"),
    ("format_version = 1\nname = \"x\"\n[nccl]\naccept = { \"NCCL_ALGO=Ring\" = \"1\" }\n", "4:12", "'NCCL_ALGO=Ring' is not an NCCL setting"),
    ("format_version = 1\nname = \"x\"\n[nccl]\naccept = { NCCL_ALGO = \"\" }\n", "4:12", "NCCL_ALGO = \"\" changes no figure"),
    ("format_version = 1\nname = \"x\"\n[nccl]\nexpect = { NCCL_ALGO = \"Ring\" }\n", "4:1", "nccl.expect: unknown field `expect`"),
    ("format_version = 1\nname = \"x\"\n[checks.compute]\nplateau_pct = -1\n", "4:1", "checks.compute.plateau_pct: plateau_pct must be from 0 (off) to below 100, got -1"),
    ("format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nremeasure = -1\n", "4:1", "checks.host_bandwidth.remeasure: invalid value: integer `-1`, expected u32"),
    ("format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nwarmup = 4294967295\n", "4:1", "warmup must be at most 100000"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_gather]\niterations = 200000\n", "4:1", "iterations must be at most 100000"),
    ("format_version = 1\nname = \"x\"\n[checks.health]\nfail_throttle = [\"hw_slowdown\", \"too_hot\"]\n", "4:33", "unknown throttle reason 'too_hot'"),
    ("format_version = 1\nname = \"x\"\n[node]\ndriver_min = \"five\"\n", "4:1", "'five' is not a version"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nlayers = [1024]\n", "4:1", "layers needs at least"),
    // impossible values (issue 13): a floor above a ceiling, at any level
    (
        "format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = 48.0, fail_above = 40.0 }\n",
        "4:9",
        "checks.host_bandwidth.h2d.fail_below: fail_below (48) is above fail_above (40)",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.p2p_latency]\nlatency_us = { warn_below = 5.0, warn_above = 4.0 }\n",
        "4:16",
        "warn_below (5) is above warn_above (4)",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.training]\nsamples_per_s = { fail_below = 9.0, warn_above = 8.0 }\n",
        "4:19",
        "fail_below (9) is above warn_above (8)",
    ),
    ("format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nh2d = { fail_below = 1e30 }\n", "4:9", "fail_below must be a number from 0 to 100000"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nread = { fail_below = nan }\n", "4:10", "checks.p2p_bandwidth.read.fail_below: fail_below must be a number"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nloss_target = -1.0\n", "4:1", "checks.training.loss_target: loss_target must be a number > 0"),
    ("format_version = 1\nname = \"x\"\n[checks.health]\nwarn_temperature_c = -5.0\n", "4:1", "checks.health.warn_temperature_c: warn_temperature_c must be above 0"),
    ("format_version = 1\nname = \"x\"\n[node]\nmemory_gib_min = 1e30\n", "4:1", "node.memory_gib_min: memory_gib_min must be 0 to 16384 GiB"),
    ("format_version = 1\nname = \"x\"\n[checks.p2p_bandwidth]\nsize = 0\n", "4:1", "checks.p2p_bandwidth.size: a size must be at least 1 byte"),
    ("format_version = 1\nname = \"x\"\n[checks.host_bandwidth]\nsize = \"0 MiB\"\n", "4:1", "checks.host_bandwidth.size: a size must be at least 1 byte"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmax_size = \"99999TiB\"\n", "4:1", "checks.collective.all_reduce.max_size: a size must be at most 64 GiB"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.broadcast]\nmin_busbw_gbps = { \"99999TiB\" = 3 }\n", "4:20", "over the largest a collective takes (64 GiB)"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_gather]\nwarn_busbw_gbps = { \"1GiB\" = 1e300 }\n", "4:21", "bus bandwidth must be 0 to 100000 GB/s"),
    ("format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nfactor = 9223372036854775807\n", "4:1", "factor must be 2 to 1048576"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nlayers = [65536, 65536, 65536, 10]\n", "4:1", "checks.training.layers: layers has 8590721034 parameters; at most 4294967296"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nlayers = [1024, 4294967296, 10]\n", "4:17", "a width in layers must be at most 65536, got 4294967296"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\ngolden_layers = [100000, 10]\n", "4:18", "a width in golden_layers must be at most 4096"),
    (
        "format_version = 1\nname = \"x\"\n[checks.training]\ngolden_layers = [2048, 2048, 10]\ngolden_batch = 65536\n",
        "4:1",
        "the golden configuration is trained on the CPU",
    ),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nbatch = 0\n", "4:1", "checks.training.batch: batch must be 1 to 1048576, got 0"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\ngolden_batch = 100000000\n", "4:1", "golden_batch must be 1 to 65536"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nsteps = 1000000000000\n", "4:1", "steps must be at most 100000"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\ngolden_lr = nan\n", "4:1", "checks.training.golden_lr: golden_lr must be a number > 0"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\nlr = 1e300\n", "4:1", "checks.training.lr: lr must be a number > 0 (as fp32), got 1e300"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\ngolden_abs_tol = -1.0\n", "4:1", "golden_abs_tol must be a number from 0 to below 1"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\ngolden_rel_tol = 1e39\n", "4:1", "golden_rel_tol must be above 0 and below 1 (relative), got 1e39"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\ngolden_steps = 0\n", "4:1", "golden_steps must be at least 1"),
    // floors per partitioning: in range, known keys, and only for a partitioning that runs
    ("format_version = 1\nname = \"x\"\n[checks.training.tensor_parallel]\nmin_scaling_efficiency = 2.0\n", "4:1", "checks.training.tensor_parallel.min_scaling_efficiency: min_scaling_efficiency must be in (0, 1.5], got 2"),
    ("format_version = 1\nname = \"x\"\n[checks.training.hybrid]\nmax_comm_fraction = 1.0\n", "4:1", "checks.training.hybrid.max_comm_fraction: max_comm_fraction must be above 0 and below 1"),
    ("format_version = 1\nname = \"x\"\n[checks.training.hybrid]\nmin_scaling = 0.5\n", "4:1", "unknown field `min_scaling`"),
    ("format_version = 1\nname = \"x\"\n[checks.training]\npartitionings = false\n[checks.training.tensor_parallel]\nmax_comm_fraction = 0.5\n", "5:18", "checks.training.tensor_parallel: floors for a partitioning that is not run"),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 2\n[topology]\nnvlink_pairs = [{ a = 0, b = 1, links = 4 }, { a = 1, b = 0, links = 8 }]\n",
        "6:46",
        "the pair 1-0 is listed twice",
    ),
    // documented limits (README, "Files and limits")
    ("format_version = 1\nname = \"x\"\n[node]\ngpu_count = 10000\n", "4:1", "node.gpu_count: gpu_count must be at most 64, got 10000"),
    // A GPU count no node has, with relations sized by it: said, never allocated (found by
    // tests/props.rs as an abort).
    ("format_version = 1\nname = \"x\"\n[node]\ngpu_count = 9223372036854775807\n[topology]\nsocket_groups = [[0], [1]]\n", "4:1", "node.gpu_count: gpu_count must be at most 64, got 9223372036854775807"),
    ("format_version = 1\nname = \"x\"\n[topology]\nnvlinks_per_pair = 4294967295\n", "4:1", "a GPU has at most 32 NVLinks, got 4294967295"),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 2\n[topology]\nnvlink_pairs = [{ a = 0, b = 1, links = 99 }]\n",
        "6:33",
        "topology.nvlink_pairs[0].links: a GPU has at most 32 NVLinks, got 99",
    ),
    (
        "format_version = 1\nname = \"x\"\n[node]\ngpu_count = 2\n[topology]\nnuma_nodes = [0, -1]\n",
        "6:18",
        "a NUMA node is 0 to 1023, got -1",
    ),
    // a level above the sweep's largest message applies to no figure (the level's key is
    // located; a key of its own, "1.5GiB", keeps its dot)
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmax_size = \"1GiB\"\nmin_busbw_gbps = { \"8GiB\" = 460.0 }\n",
        "5:20",
        "the level at 8 GiB applies to no measured size: the largest message the sweep measures is 1 GiB",
    ),
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_gather]\nmax_size = \"1GiB\"\nwarn_busbw_gbps = { \"1.5GiB\" = 300.0 }\n",
        "5:21",
        "the level at 1.5 GiB applies to no measured size",
    ),
    // NVLS if available with floors but none for the ring: a node without NVLS judged nothing
    (
        "format_version = 1\nname = \"x\"\n[checks.collective.all_reduce]\nmax_size = \"8GiB\"\nmin_busbw_gbps = { \"8GiB\" = 460.0 }\nnvls = \"if_available\"\n",
        "6:1",
        "needs min_busbw_gbps_no_nvls",
    ),
    // baseline: range, unknown key, missing file (read while loading, before any run)
    ("format_version = 1\nname = \"x\"\n[baseline]\nevidence = \"old.json\"\nmax_regression_pct = 100\n", "5:1", "max_regression_pct must be between 0 and 100"),
    ("format_version = 1\nname = \"x\"\n[baseline]\nevidence = \"old.json\"\nmax_regresion_pct = 3\n", "5:1", "unknown field `max_regresion_pct`"),
    ("format_version = 1\nname = \"x\"\n[baseline]\nevidence = \"old.json\"\n", "4:1", "cannot read old.json"),
];

#[test]
fn every_broken_suite_is_located_and_exits_2() {
    let env = Env::new();
    for (i, (text, at, words)) in BROKEN.iter().enumerate() {
        let name = format!("broken{i}.toml");
        env.write(&name, text);
        let a = env.cmd().args(["check", &name]).assert().code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(
            err.contains(&format!("{name}:{at}:")),
            "case {i}: expected {name}:{at}: in\n{err}"
        );
        assert!(
            err.contains(words),
            "case {i}: expected '{words}' in\n{err}"
        );
        // `run` validates before touching any node.
        env.cmd()
            .args(["run", &name, "--simulate", "h100-sxm-8"])
            .assert()
            .code(2);
    }
}

#[test]
fn errors_in_an_inherited_file_name_that_file() {
    let env = Env::new();
    env.write("parent.toml", "format_version = 1\nname = \"p\"\n[checks.p2p_latency]\nlatency_us = { fail_above = 5.0, warn_above = 9.0 }\n");
    env.write(
        "child.toml",
        "format_version = 1\nname = \"c\"\nextends = \"parent.toml\"\n",
    );
    env.cmd()
        .args(["check", "child.toml"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("parent.toml:4:34:").and(predicate::str::contains(
                "warn_above (9) is above fail_above (5)",
            )),
        );
    env.write(
        "loop-a.toml",
        "format_version = 1\nname = \"a\"\nextends = \"loop-b.toml\"\n",
    );
    env.write(
        "loop-b.toml",
        "format_version = 1\nname = \"b\"\nextends = \"loop-a.toml\"\n",
    );
    env.cmd()
        .args(["check", "loop-a.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cycle"));
    env.write(
        "orphan.toml",
        "format_version = 1\nname = \"o\"\nextends = \"nowhere.toml\"\n",
    );
    env.cmd()
        .args(["check", "orphan.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("orphan.toml:3:1:"));
}

/// A limit that clashes with a level it inherits is reported where the child wrote its half, not
/// at the parent's line the child cannot change; a clash inside one file stays at the key that
/// is out of order.
#[test]
fn a_clash_with_an_inherited_level_points_at_the_childs_key() {
    let env = Env::new();
    env.write(
        "child.toml",
        "format_version = 1\nname = \"c\"\nextends = \"h100-sxm-8\"\n[checks.p2p_latency]\n\
         latency_us = { fail_above = 0.0 }\n",
    );
    env.cmd()
        .args(["check", "child.toml"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains(
                "child.toml:5:16: checks.p2p_latency.latency_us.fail_above: warn_above (6) is \
                 above fail_above (0)",
            )
            .and(predicate::str::contains("embedded:").not()),
        );
    // A floor the child raises above an inherited ceiling: at the child's floor.
    env.write(
        "floor.toml",
        "format_version = 1\nname = \"f\"\nextends = \"h100-sxm-8\"\n[checks.p2p_latency]\n\
         latency_us = { fail_below = 20.0 }\n",
    );
    env.cmd()
        .args(["check", "floor.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "floor.toml:5:16: checks.p2p_latency.latency_us.fail_below: fail_below (20) is above",
        ));
    // Both halves in the child: at the warning level, as before.
    env.write(
        "both.toml",
        "format_version = 1\nname = \"b\"\nextends = \"h100-sxm-8\"\n[checks.p2p_latency]\n\
         latency_us = { fail_above = 1.0, warn_above = 2.0 }\n",
    );
    env.cmd()
        .args(["check", "both.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "both.toml:5:34: checks.p2p_latency.latency_us.warn_above",
        ));
}

#[test]
fn a_child_overrides_parts_of_an_embedded_suite() {
    let env = Env::new();
    // Raise one floor above what the node delivers: only that check fails.
    env.write(
        "strict.toml",
        "format_version = 1\nname = \"strict-h100\"\nextends = \"h100-sxm-8\"\n[checks.host_bandwidth]\nh2d = { fail_below = 60.0, warn_below = 61.0 }\n[checks.training]\nenabled = false\n",
    );
    env.cmd()
        .args([
            "run",
            "strict.toml",
            "--simulate",
            "h100-sxm-8",
            "--out",
            "o",
            "-q",
        ])
        .assert()
        .code(1);
    let ev = util::read_json(&env.path("o/evidence.json"));
    let checks = ev["checks"].as_array().unwrap();
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["host_bandwidth"]);
    assert!(
        checks.iter().all(|c| c["id"] != "training"),
        "training was disabled"
    );
    // The inherited d2h floor stayed.
    assert_eq!(
        ev["suite"]["resolved"]["checks"]["host_bandwidth"]["d2h"]["fail_below"],
        48.0
    );
    assert_eq!(ev["suite"]["chain"][1], "embedded:h100-sxm-8");
}

/// A suite may hold tensor parallelism to a floor: on the PCIe box, where it keeps about 40% of
/// linear scaling, a floor of 60% fails the training check by that method alone, and one of 30%
/// passes; without a floor the same figure is reported (the shipped suite passes).
#[test]
fn a_floor_on_tensor_parallelism_fails_a_pcie_box_only_where_the_suite_asks() {
    let env = Env::new();
    let run = |floor: f64| {
        let name = format!("tp{floor}.toml");
        env.write(
            &name,
            &format!(
                "format_version = 1\nname = \"tp\"\nextends = \"l40s-pcie-4\"\n\
                 [checks.training.tensor_parallel]\nmin_scaling_efficiency = {floor}\n"
            ),
        );
        let out = format!("o{floor}");
        let a = env
            .cmd()
            .args([
                "run",
                &name,
                "--simulate",
                "l40s-pcie-4",
                "--out",
                &out,
                "-q",
            ])
            .assert();
        let code = a.get_output().status.code();
        let ev = util::read_json(&env.path(&format!("{out}/evidence.json")));
        let training = ev["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "training")
            .unwrap()
            .clone();
        (code, training)
    };
    let (code, t) = run(0.6);
    assert_eq!(code, Some(1));
    assert_eq!(t["status"], "fail");
    let failed: Vec<String> = t["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| format!("{} {}", f["subject"]["method"], f["metric"]))
        .collect();
    assert_eq!(failed, ["\"tensor-parallel\" \"scaling_efficiency\""]);
    let (code, t) = run(0.3);
    assert_eq!(code, Some(0));
    assert_eq!(t["status"], "pass");
    // The report names the method and its floor.
    let md = std::fs::read_to_string(env.path("o0.6/report.md")).unwrap();
    assert!(md.contains("| tensor-parallel | 4 x 1 |"), "{md}");
}

#[test]
fn missing_suite_file_is_invalid_input() {
    let env = Env::new();
    env.cmd()
        .args(["check", "nope.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read nope.toml"));
    env.cmd()
        .args(["check", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("embedded: base"));
}

/// (text to replace in the embedded h100-sxm-8 node, or "" to append; its replacement; words the
/// message must contain). The error must point at the line of the replacement.
const BROKEN_NODES: &[(&str, &str, &str)] = &[
    (
        "count = 8",
        "count = 10000",
        "gpu.count: a node has 1 to 64 GPUs, got 10000",
    ),
    ("count = 8", "count = 0", "a node has 1 to 64 GPUs, got 0"),
    (
        "nvlinks_per_gpu = 18",
        "nvlinks_per_gpu = 4294967295",
        "at most 32 NVLinks",
    ),
    (
        "nvswitches = 4",
        "nvswitches = 4000",
        "at most 16 NVSwitches",
    ),
    (
        "temperature_c = 34.0",
        "temperature_c = nan",
        "gpu.temperature_c: must be a number from 0 to 200, got NaN",
    ),
    (
        "power_limit_w = 700.0",
        "power_limit_w = -700.0",
        "gpu.power_limit_w: must be a number",
    ),
    (
        "h2d_gbps = 55.0",
        "h2d_gbps = inf",
        "perf.h2d_gbps: a bandwidth is a number from 0 to 100000 GB/s, got inf",
    ),
    (
        "staged_gbps = 18.0",
        "staged_gbps = -18.0",
        "perf.staged_gbps: a bandwidth",
    ),
    (
        "p2p_latency_us = 2.4",
        "p2p_latency_us = -2.4",
        "perf.p2p_latency_us: a latency is a number",
    ),
    (
        "device_copy_gbps = 2900.0",
        "device_copy_gbps = 0.0",
        "perf.device_copy_gbps: must be a number above 0",
    ),
    (
        "fp32_tflops = 51.0",
        "fp32_tflops = nan",
        "perf.fp32_tflops: must be a number above 0",
    ),
    (
        "all_reduce = 480.0",
        "all_reduce = -480.0",
        "perf.collective_busbw_gbps.all_reduce",
    ),
    (
        "noise_pct = 1.0",
        "noise_pct = nan",
        "noise_pct must be 0 to 30 (a sample is at most 3 sigma off), got NaN",
    ),
    (
        "noise_pct = 1.0",
        "noise_pct = 40.0",
        "noise_pct must be 0 to 30",
    ),
    (
        "sustained_rate_fraction = 0.85",
        "sustained_rate_fraction = 1.5",
        "perf.sustained_rate_fraction: the share of the burst rate kept under load, above 0 and at most 1, got 1.5",
    ),
    (
        "sustained_sm_clock_mhz = 1570",
        "sustained_sm_clock_mhz = 2500",
        "perf.sustained_sm_clock_mhz: must be 1 to gpu.sm_clock_max_mhz (1980) MHz, got 2500",
    ),
    (
        "bus_stride = 0x10",
        "bus_stride = 0x1000000",
        "bus numbers are 0 to 0xff",
    ),
    // A first bus past the last is that key's fault, at its own line, whatever the stride.
    (
        "first_bus = 0x18",
        "first_bus = 0x100",
        "gpu.first_bus: first_bus is 0x100: bus numbers are 0 to 0xff",
    ),
    ("pcie_gen = 5", "pcie_gen = 99", "pcie_gen must be 1 to 7"),
    // Real addresses, per-pair PCIe paths and per-class figures (issue 14 item 1).
    (
        "first_bus = 0x18",
        "bus_ids = [\"0000:18:00.0\", \"0000:2a:00.0\", \"0000:3a:00.0\", \"0000:5d:00.0\", \"0000:9a:00.0\", \"0000:ab:00.0\", \"0000:ba:00.0\", \"0000:db:00.0\"]\nfirst_bus = 0x18",
        "give bus_ids or first_bus and bus_stride, not both",
    ),
    (
        "first_bus = 0x18\nbus_stride = 0x10",
        "bus_ids = [\"0000:18:00.0\", \"0000:2a:00.0\"]",
        "bus_ids lists 2 GPUs, gpu.count is 8",
    ),
    (
        "first_bus = 0x18\nbus_stride = 0x10",
        "bus_ids = [\"0000:18:00.0\", \"0000:2a:00.0\", \"0000:3a:00.0\", \"0000:5d:00.0\", \"0000:9a:00.0\", \"0000:ab:00.0\", \"0000:ba:00\", \"0000:db:00.0\"]",
        "is not a PCI address like 0000:18:00.0",
    ),
    (
        "first_bus = 0x18\nbus_stride = 0x10",
        "bus_ids = [\"0000:18:00.0\", \"0000:2a:00.0\", \"0000:3a:00.0\", \"0000:5d:00.0\", \"0000:9a:00.0\", \"0000:18:00.0\", \"0000:ba:00.0\", \"0000:db:00.0\"]",
        "GPU 5 has the address of GPU 0: 0000:18:00.0",
    ),
    (
        "p2p = true",
        "pcie_paths = [{ a = 0, b = 8, path = \"PIX\" }]\np2p = true",
        "pair 0-8 is not two GPUs of 0..7",
    ),
    (
        "p2p = true",
        "pcie_paths = [{ a = 0, b = 1, path = \"PIX\" }, { a = 1, b = 0, path = \"PXB\" }]\np2p = true",
        "pair 1-0 is listed twice",
    ),
    (
        "p2p = true",
        "pcie_paths = [{ a = 0, b = 1, path = \"NV18\" }]\np2p = true",
        "unknown variant",
    ),
    (
        "p2p_pcie_gbps = 40.0",
        "p2p_pcie_gbps_by_path = { PIX = 26.0, SYS = -19.0 }\np2p_pcie_gbps = 40.0",
        "perf.p2p_pcie_gbps_by_path.SYS: a bandwidth is a number",
    ),
    (
        "p2p_pcie_bidir_gbps = 70.0",
        "p2p_pcie_bidir_gbps_by_path = { PXB = inf }\np2p_pcie_bidir_gbps = 70.0",
        "perf.p2p_pcie_bidir_gbps_by_path.PXB: a bandwidth is a number",
    ),
    (
        "p2p_latency_us = 2.4",
        "p2p_latency_us_by_path = { SYS = nan }\np2p_latency_us = 2.4",
        "perf.p2p_latency_us_by_path.SYS: a latency is a number",
    ),
    (
        "numa_nodes = [0, 0, 0, 0, 1, 1, 1, 1]",
        "numa_nodes = [0, 0, 0, 0, 1, 1, 1, -1]",
        "a NUMA node is 0 to 1023, got -1",
    ),
    // Faults in a node file get the same checks as --inject.
    (
        "",
        "[[faults]]\nkind = \"slow-gpu-pair\"\nfactor = nan\n",
        "factor must be a number from 0 to 100, got NaN",
    ),
    (
        "",
        "[[faults]]\nkind = \"slow-host-bandwidth\"\nfactor = -0.5\n",
        "factor must be a number from 0 to 100, got -0.5",
    ),
    (
        "",
        "[[faults]]\nkind = \"xid\"\nage_h = inf\n",
        "age_h must be a number of hours",
    ),
    (
        "",
        "[[faults]]\nkind = \"pcie-downtrained\"\ngen = 99\n",
        "gen must be 1 to 7, got 99",
    ),
];

#[test]
fn every_broken_node_file_is_located_and_exits_2() {
    let env = Env::new();
    let base = nodecert::backend::sim::EMBEDDED
        .iter()
        .find(|(n, _)| *n == "h100-sxm-8")
        .expect("embedded node")
        .1;
    for (i, (from, to, words)) in BROKEN_NODES.iter().enumerate() {
        let text = if from.is_empty() {
            format!("{base}\n{to}")
        } else {
            assert!(base.contains(from), "case {i}: {from}");
            base.replacen(from, to, 1)
        };
        let line = text[..text.find(to).unwrap()].matches('\n').count() + 1;
        let name = format!("node{i}.toml");
        env.write(&name, &text);
        let a = env
            .cmd()
            .args(["inventory", "--simulate", &name])
            .assert()
            .code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(
            err.contains(&format!("{name}:{line}:")),
            "case {i}: expected {name}:{line}: in\n{err}"
        );
        assert!(
            err.contains(words),
            "case {i}: expected '{words}' in\n{err}"
        );
    }
}

#[test]
fn inject_refuses_what_a_node_file_refuses() {
    let env = Env::new();
    for (spec, words) in [
        (
            "slow-gpu-pair:factor=nan",
            "factor must be a number from 0 to 100, got NaN",
        ),
        (
            "slow-host-bandwidth:factor=-0.5",
            "factor must be a number from 0 to 100, got -0.5",
        ),
        ("xid:age_h=inf", "age_h must be a number of hours"),
        ("pcie-downtrained:gen=99", "gen must be 1 to 7, got 99"),
    ] {
        env.cmd()
            .args([
                "run",
                "h100-sxm-8",
                "--simulate",
                "h100-sxm-8",
                "--inject",
                spec,
                "-q",
                "--out",
                "o",
            ])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(words));
    }
}

#[test]
fn a_suite_whose_evidence_could_not_be_read_back_is_refused_before_the_run() {
    let env = Env::new();
    env.write(
        "big.toml",
        "format_version = 1\nname = \"big\"\nextends = \"h100-sxm-8\"\n[checks.p2p_bandwidth]\niterations = 100000\n",
    );
    // The suite itself loads; on a node of 8 GPUs (the one it states, which `check` plans on)
    // its evidence would not read back: check says so, at the key, and never calls it valid;
    // `check` on a node of 1 GPU, which records no pair, calls it valid and plans it.
    env.cmd()
        .args(["check", "big.toml"])
        .assert()
        .code(2)
        .stdout(predicate::str::contains("valid.").not())
        .stderr(predicate::str::contains(
            "big.toml:5:1: `checks.p2p_bandwidth.iterations`",
        ));
    env.cmd()
        .args(["check", "big.toml", "--simulate", "h200-vm-1"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("valid."));
    env.cmd()
        .args([
            "run",
            "big.toml",
            "--simulate",
            "h100-sxm-8",
            "-q",
            "--out",
            "o",
        ])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("big.toml:5:1: `checks.p2p_bandwidth.iterations`")
                .and(predicate::str::contains("samples")),
        );
    assert!(!env.path("o/evidence.json").exists(), "nothing ran");
}
