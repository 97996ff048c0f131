//! OSU micro-benchmarks' conventions (`--osu`): their flags, read into ours before the command line
//! is parsed ([`translate`]), and their tables, written line for line as OMB 7.4 writes them, so that
//! scripts that read OSU's output read ours.
//!
//! | OSU flag | meaning in OSU | ours under `--osu` | ours without `--osu` |
//! |---|---|---|---|
//! | `-m MIN:MAX` (or `-m MAX`) | message sizes | `-b MIN -e MAX` | (none) |
//! | `-i N` | timed iterations | `-n N` | nccl-tests' `-i`: step in bytes |
//! | `-x N` | warm-up iterations | `-w N` | (none) |
//! | `-f` | full statistics: min, max, iterations | `--minmax` | nccl-tests' `-f`: step factor |
//! | `-c` | validation (no value) | `-c 1` | `-c 0\|1` (a value) |
//! | `-d cuda` | device buffers | `--backend cuda-mpi`, unless `--backend` names another device backend | nccl-tests' `-d`: data type |
//! | `-T mpi_char\|mpi_int\|mpi_float` | data type | `--datatype int8\|int32\|float` | (none) |
//!
//! Under `--osu` the nccl-tests meanings stay reachable by their long names (`--stepbytes`,
//! `--stepfactor`, `--datatype`, `--check`). OSU's defaults apply where its flags are absent: sizes 1 B
//! to 1 MiB for collectives (p2p keeps its 1 B to 4 MiB), `MPI_CHAR` data, no validation, and for
//! collectives 1000 iterations after 200 warm-up ones (OSU takes 100 after 10 above 8 KiB; the engine
//! takes the same number at every size).

use crate::output::record::Row;

/// OSU's size column: `%-10d`.
const SIZE_WIDTH: usize = 10;
/// OSU's `FIELD_WIDTH`.
const FIELD: usize = 18;

/// `argv` with OSU's flags read into ours when it holds `--osu` after the subcommand; unchanged
/// otherwise.
///
/// # Errors
/// An OSU flag without its value, or with a value OSU does not take.
pub fn translate(argv: Vec<String>) -> Result<Vec<String>, String> {
    if !argv.iter().any(|a| a == "--osu") || argv.len() < 2 {
        return Ok(argv);
    }
    let p2p = argv[1] == "p2p";
    let mut out: Vec<String> = argv[..2].to_vec();
    let mut rest = argv[2..].iter().cloned();
    let (mut sizes, mut iters, mut warmup, mut check, mut dtype) =
        (false, false, false, false, false);
    // `-d cuda`, and the backend named by `--backend`, if any.
    let (mut cuda, mut backend): (bool, Option<String>) = (false, None);
    // A short flag's value: attached (`-m1:64`) or the next argument.
    let value = |flag: &str, arg: &str, rest: &mut dyn Iterator<Item = String>| {
        let attached = &arg[flag.len()..];
        if attached.is_empty() {
            rest.next().ok_or(format!("--osu: {flag} needs a value"))
        } else {
            Ok(attached.to_string())
        }
    };
    while let Some(arg) = rest.next() {
        let short = |f: &str| arg == f || (arg.starts_with(f) && arg.len() > f.len());
        if arg == "--" {
            out.push(arg);
            out.extend(rest.by_ref());
            break;
        } else if short("-m") {
            let v = value("-m", &arg, &mut rest)?;
            let (min, max) = v.split_once(':').unwrap_or(("1", v.as_str()));
            let min = if min.is_empty() { "1" } else { min };
            out.extend(["-b".into(), min.to_string(), "-e".into(), max.to_string()]);
            sizes = true;
        } else if short("-i") {
            out.extend(["-n".into(), value("-i", &arg, &mut rest)?]);
            iters = true;
        } else if short("-x") {
            out.extend(["-w".into(), value("-x", &arg, &mut rest)?]);
            warmup = true;
        } else if arg == "-f" {
            if p2p {
                return Err("--osu: OSU's point-to-point tests have no -f".into());
            }
            out.push("--minmax".into());
        } else if arg == "-c" {
            out.extend(["-c".into(), "1".into()]);
            check = true;
        } else if short("-d") {
            match value("-d", &arg, &mut rest)?.as_str() {
                "cuda" => cuda = true,
                other => return Err(format!("--osu: -d {other}: only `-d cuda` is supported")),
            }
        } else if short("-T") {
            let t = match value("-T", &arg, &mut rest)?.as_str() {
                "mpi_char" => "int8",
                "mpi_int" => "int32",
                "mpi_float" => "float",
                other => return Err(format!("--osu: -T {other}: mpi_char, mpi_int or mpi_float")),
            };
            out.extend(["--datatype".into(), t.into()]);
            dtype = true;
        } else {
            if arg == "--datatype" || arg.starts_with("--datatype=") {
                dtype = true;
            }
            if arg == "--check" || arg.starts_with("--check=") {
                check = true;
            }
            if let Some(b) = arg.strip_prefix("--backend=") {
                backend = Some(b.to_string());
            } else if arg == "--backend" {
                backend = rest.next();
                out.push(arg);
                out.extend(backend.clone());
                continue;
            }
            out.push(arg);
        }
    }
    // `-d cuda` picks the CUDA-aware backend unless another device backend is named.
    match (cuda, backend.as_deref()) {
        (true, None) => out.extend(["--backend".into(), "cuda-mpi".into()]),
        (true, Some("mpi")) => {
            return Err(
                "--osu: -d cuda asks for device buffers, --backend mpi is host memory".into(),
            )
        }
        _ => {}
    }
    // OSU's defaults where its flags are absent.
    let mut defaults: Vec<&str> = Vec::new();
    if !check {
        defaults.extend(["-c", "0"]);
    }
    if !p2p {
        if !sizes {
            defaults.extend(["-b", "1", "-e", "1M"]);
        }
        if !iters {
            defaults.extend(["-n", "1000"]);
        }
        if !warmup {
            defaults.extend(["-w", "200"]);
        }
        if !dtype {
            defaults.extend(["--datatype", "int8"]);
        }
    }
    out.splice(2..2, defaults.into_iter().map(String::from));
    Ok(out)
}

/// OSU's name of a collective's test (`Allreduce Latency Test`).
pub fn title(collective: &str) -> String {
    let name = match collective {
        "allreduce" => "Allreduce",
        "allgather" => "Allgather",
        "allgatherv" => "Allgatherv",
        "reducescatter" => "Reduce_scatter",
        "broadcast" => "Broadcast",
        "reduce" => "Reduce",
        "alltoall" => "All-to-All Personalized Exchange",
        "alltoallv" => "All-to-Allv Personalized Exchange",
        "gather" => "Gather",
        "gatherv" => "Gatherv",
        "scatter" => "Scatter",
        "scatterv" => "Scatterv",
        "barrier" => "Barrier",
        "sendrecv" => "Sendrecv",
        other => other,
    };
    format!("{name} Latency Test")
}

/// OSU's name of a collective's persistent test (`osu_allreduce_persistent`: `Allreduce Persistent
/// Latency Test`).
pub fn persistent_title(collective: &str) -> String {
    title(collective).replace(" Latency Test", " Persistent Latency Test")
}

/// OSU's prefix for a backend: `OSU MPI` on host memory, `OSU MPI-CUDA` on device memory through
/// MPI, `OSU NCCL` on NCCL.
pub fn suite(backend: &str) -> &'static str {
    match backend {
        "mpi" => "OSU MPI",
        "nccl" => "OSU NCCL",
        _ => "OSU MPI-CUDA",
    }
}

/// The MPI name of a `-d` type, as OSU's `# Datatype:` line gives it.
pub fn mpi_type_name(dtype: &str) -> &str {
    match dtype {
        "int8" | "byte" => "MPI_CHAR",
        "uint8" => "MPI_UNSIGNED_CHAR",
        "int32" => "MPI_INT",
        "uint32" => "MPI_UNSIGNED",
        "int64" => "MPI_INT64_T",
        "uint64" => "MPI_UINT64_T",
        "float" => "MPI_FLOAT",
        "double" => "MPI_DOUBLE",
        "complex64" => "MPI_C_FLOAT_COMPLEX",
        "complex128" => "MPI_C_DOUBLE_COMPLEX",
        other => other,
    }
}

fn field(text: &str) -> String {
    format!("{text:>FIELD$}")
}

fn number(x: f64) -> String {
    format!("{x:>FIELD$.2}")
}

/// The lines OSU writes before a collective's table: a blank line, the test's name, the data type
/// and the column names (`-f`: min, max and iterations too; with validation, its column).
pub fn collective_header(collective: &str, row: &Row, full: bool, validation: bool) -> Vec<String> {
    let mut lines = vec![
        String::new(),
        format!(
            "# {} {} v7.4",
            suite(row.backend),
            if row.variant == "persistent" {
                persistent_title(collective)
            } else {
                title(collective)
            }
        ),
    ];
    // OSU's persistent tests have a title of their own; the other variants a line.
    if row.variant != "library" && row.variant != "persistent" {
        lines.push(format!("# Variant: {}.", row.variant));
    }
    let mut columns = String::new();
    if collective == "barrier" {
        columns.push_str("# Avg Latency(us)");
    } else {
        lines.push(format!("# Datatype: {}.", mpi_type_name(row.dtype)));
        columns.push_str(&format!("{:<SIZE_WIDTH$}", "# Size"));
        columns.push_str(&field("Avg Latency(us)"));
    }
    if full {
        columns.push_str(&field("Min Latency(us)"));
        columns.push_str(&field("Max Latency(us)"));
        columns.push_str(&format!("{:>12}", "Iterations"));
    }
    if validation {
        columns.push_str(&field("Validation"));
    }
    lines.push(columns);
    lines
}

/// A collective's row as OSU writes it: the size, then the average (with `-f`: min, max and
/// iterations) in microseconds, out of place; `Pass` or `Fail` where validated.
pub fn collective_row(collective: &str, row: &Row, iters: usize, full: bool) -> String {
    let t = row.oop.time;
    let mut s = if collective == "barrier" {
        format!("{:>17.2}", t.avg * 1e6)
    } else {
        format!("{:<SIZE_WIDTH$}{}", row.size, number(t.avg * 1e6))
    };
    if full {
        s.push_str(&number(t.min * 1e6));
        s.push_str(&number(t.max * 1e6));
        s.push_str(&format!("{iters:>12}"));
    }
    if let Some(w) = row.oop.wrong {
        s.push_str(&field(if w == 0 { "Pass" } else { "Fail" }));
    }
    s
}

/// A point-to-point test as OSU names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pTest {
    /// `osu_latency`.
    Latency,
    /// `osu_bw`.
    Bw,
    /// `osu_bibw`.
    Bibw,
    /// `osu_mbw_mr`: `pairs` pairs, windows of `window` messages.
    MbwMr {
        /// Sending ranks (the first half), each with a receiver in the second half.
        pairs: usize,
        /// Messages per window.
        window: usize,
    },
}

/// The lines OSU writes before a point-to-point table on `backend`.
pub fn p2p_header(test: P2pTest, backend: &str, validation: bool) -> Vec<String> {
    let suite = suite(backend);
    let mut lines = match test {
        P2pTest::Latency => vec![String::new(), format!("# {suite} Latency Test v7.4")],
        P2pTest::Bw => vec![String::new(), format!("# {suite} Bandwidth Test v7.4")],
        P2pTest::Bibw => vec![
            String::new(),
            format!("# {suite} Bi-Directional Bandwidth Test v7.4"),
        ],
        P2pTest::MbwMr { pairs, window } => vec![
            format!("# {suite} Multiple Bandwidth / Message Rate Test v7.4"),
            format!("# [ pairs: {pairs} ] [ window size: {window} ]"),
        ],
    };
    lines.push("# Datatype: MPI_CHAR.".to_string());
    let mut columns = format!("{:<SIZE_WIDTH$}", "# Size");
    match test {
        P2pTest::Latency => columns.push_str(&field("Avg Latency(us)")),
        P2pTest::Bw | P2pTest::Bibw => columns.push_str(&field("Bandwidth (MB/s)")),
        P2pTest::MbwMr { .. } => {
            columns.push_str(&field("MB/s"));
            columns.push_str(&field("Messages/s"));
        }
    }
    if validation {
        columns.push_str(&field("Validation"));
    }
    lines.push(columns);
    lines
}

/// A point-to-point row: the size, then the latency (us) or the bandwidth (MB/s, 1 MB = 1e6 bytes),
/// and for `osu_mbw_mr` the message rate; `Pass` or `Fail` where validated.
pub fn p2p_row(
    test: P2pTest,
    size: usize,
    seconds: f64,
    bytes_per_s: f64,
    wrong: Option<u64>,
) -> String {
    let mut s = format!("{size:<SIZE_WIDTH$}");
    match test {
        P2pTest::Latency => s.push_str(&number(seconds * 1e6)),
        P2pTest::Bw | P2pTest::Bibw => s.push_str(&number(bytes_per_s / 1e6)),
        P2pTest::MbwMr { .. } => {
            s.push_str(&number(bytes_per_s / 1e6));
            s.push_str(&number(bytes_per_s / size.max(1) as f64));
        }
    }
    if let Some(w) = wrong {
        s.push_str(&field(if w == 0 { "Pass" } else { "Fail" }));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::timing::Spread;
    use crate::output::record::tests::row_us;
    use crate::output::record::Placement;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn osu_flags_become_ours() {
        let a = translate(argv(
            "collbench allreduce --osu -m 4:64K -i 10 -x 2 -f -c -d cuda",
        ))
        .unwrap();
        assert_eq!(
            a.join(" "),
            "collbench allreduce --datatype int8 --osu -b 4 -e 64K -n 10 -w 2 --minmax -c 1 --backend cuda-mpi"
        );
        let a = translate(argv("collbench allgather --osu -m 128 -T mpi_float")).unwrap();
        assert_eq!(
            a.join(" "),
            "collbench allgather -c 0 -n 1000 -w 200 --osu -b 1 -e 128 --datatype float"
        );
        let a = translate(argv("collbench p2p --osu --test bibw -m1:8")).unwrap();
        assert_eq!(
            a.join(" "),
            "collbench p2p -c 0 --osu --test bibw -b 1 -e 8"
        );
        // Without --osu nothing changes: -i, -f, -d and -c are nccl-tests'.
        let plain = argv("collbench allreduce -i 8 -d float -c 1");
        assert_eq!(translate(plain.clone()).unwrap(), plain);
        // `-d cuda` beside a device backend named by --backend keeps that backend.
        for named in ["--backend mpi-staged", "--backend=nccl"] {
            let a = translate(argv(&format!("collbench allreduce --osu -d cuda {named}"))).unwrap();
            assert_eq!(a.iter().filter(|x| x.starts_with("--backend")).count(), 1);
            assert!(a.join(" ").ends_with(named), "{a:?}");
        }
        assert!(translate(argv("collbench allreduce --osu -d cuda --backend mpi")).is_err());
        assert!(translate(argv("collbench allreduce --osu -d managed")).is_err());
        assert!(translate(argv("collbench allreduce --osu -i")).is_err());
        assert!(translate(argv("collbench p2p --osu -f")).is_err());
    }

    fn row(size: usize, us: f64, wrong: Option<u64>) -> Row {
        let p = Placement {
            time: Spread {
                avg: us * 1e-6,
                min: 1.21e-6,
                max: 1.35e-6,
            },
            wrong,
            ..Placement::default()
        };
        Row {
            count: size,
            dtype: "int8",
            oop: p,
            ip: p,
            ..row_us(size, us)
        }
    }

    /// OMB 7.4's own output (`mpirun -n 2 osu_allreduce -f -m 1:64 -i 10 -x 2`, and without `-f`).
    #[test]
    fn collective_tables_match_omb() {
        let full = collective_header("allreduce", &row(1, 1.28, None), true, false);
        assert_eq!(
            full,
            [
                "",
                "# OSU MPI Allreduce Latency Test v7.4",
                "# Datatype: MPI_CHAR.",
                "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations",
            ]
        );
        assert_eq!(
            collective_row("allreduce", &row(1, 1.28, None), 10, true),
            "1                       1.28              1.21              1.35          10"
        );
        let short = collective_header("allreduce", &row(1, 1.36, None), false, false);
        assert_eq!(short[3], "# Size       Avg Latency(us)");
        assert_eq!(
            collective_row("allreduce", &row(16, 0.25, None), 10, false),
            "16                      0.25"
        );
        let barrier = collective_header("barrier", &row(0, 1.27, None), true, false);
        assert_eq!(
            barrier[2],
            "# Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations"
        );
        let mut b = row(0, 1.27, None);
        b.oop.time = Spread::uniform(1.27e-6);
        assert_eq!(
            collective_row("barrier", &b, 10, true),
            "             1.27              1.27              1.27          10"
        );
        assert!(title("alltoall").starts_with("All-to-All Personalized Exchange"));
        assert_eq!(
            persistent_title("alltoall"),
            "All-to-All Personalized Exchange Persistent Latency Test"
        );
        assert_eq!(
            persistent_title("allreduce"),
            "Allreduce Persistent Latency Test"
        );
    }

    /// OMB 7.4's `osu_latency -c`, `osu_bw`, `osu_bibw` and `osu_mbw_mr` (`-m 1:8 -i 10 -x 2`).
    #[test]
    fn p2p_tables_match_omb() {
        let lat = p2p_header(P2pTest::Latency, "mpi", true);
        assert_eq!(lat[1], "# OSU MPI Latency Test v7.4");
        assert_eq!(lat[3], "# Size       Avg Latency(us)        Validation");
        assert_eq!(
            p2p_row(P2pTest::Latency, 1, 0.27e-6, 0.0, Some(0)),
            "1                       0.27              Pass"
        );
        let bw = p2p_header(P2pTest::Bw, "mpi", false);
        assert_eq!(
            bw[1..],
            [
                "# OSU MPI Bandwidth Test v7.4",
                "# Datatype: MPI_CHAR.",
                "# Size      Bandwidth (MB/s)"
            ]
        );
        assert_eq!(
            p2p_row(P2pTest::Bw, 8, 0.0, 137.06e6, None),
            "8                     137.06"
        );
        assert_eq!(
            p2p_header(P2pTest::Bibw, "mpi", false)[1],
            "# OSU MPI Bi-Directional Bandwidth Test v7.4"
        );
        let mr = P2pTest::MbwMr {
            pairs: 1,
            window: 64,
        };
        assert_eq!(
            p2p_header(mr, "mpi", false),
            [
                "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4",
                "# [ pairs: 1 ] [ window size: 64 ]",
                "# Datatype: MPI_CHAR.",
                "# Size                  MB/s        Messages/s",
            ]
        );
        assert_eq!(
            p2p_row(mr, 2, 0.0, 32.57e6, None),
            "2                      32.57       16285000.00"
        );
    }
}
