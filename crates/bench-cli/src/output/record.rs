//! The one result model: what the engine measured at one size ([`Row`]), and the one schema of
//! every result collbench writes as CSV or JSON and reads back to plot ([`Record`]); `--format`, and
//! where rank 0 writes.
//!
//! A [`Record`] is one measurement: one size of one collective (or point-to-point test) on one
//! backend, variant and placement, with what it ran on (machine, MPI library, NCCL release) so that
//! records from several runs and machines can be put side by side. CSV has one column per field, in
//! [`Record::COLUMNS`] order (an absent optional field is an empty cell); JSON is a [`Document`]: the
//! run's settings and notes, then the records. Both come from the same serde serialization, so they
//! cannot drift apart.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use anyhow::Context;

use crate::measure::timing::Spread;

/// The `schema` value of the documents this version writes.
pub const SCHEMA: &str = "collbench-results/1";

/// What a run ran on: the same for every record of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name of rank 0.
    pub host: String,
    /// CPU cores of rank 0's machine.
    pub cores: usize,
    /// `MPI_Get_library_version`'s first line.
    pub mpi_library: String,
    /// The NCCL release loaded, where the NCCL backend started.
    pub nccl_version: Option<String>,
}

impl Machine {
    /// This machine and its MPI library (no NCCL until a backend loads it).
    pub fn here() -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".to_string());
        // The machine's cores, not the few a launcher may bind this process to.
        let cores = std::fs::read_to_string("/proc/cpuinfo")
            .map(|c| c.lines().filter(|l| l.starts_with("processor")).count())
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mpi_library = mpi::environment::library_version()
            .ok()
            .and_then(|v| {
                v.lines().next().map(|l| {
                    l.trim_matches(|c: char| c.is_whitespace() || c == '\0')
                        .to_string()
                })
            })
            .unwrap_or_else(|| "unknown".to_string());
        Machine {
            host,
            cores,
            mpi_library,
            nccl_version: None,
        }
    }
}

/// One measurement. Times are microseconds per call, bandwidths GB/s (1 GB = 1e9 bytes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Host name of rank 0.
    pub host: String,
    /// CPU cores of rank 0's machine.
    pub cores: usize,
    /// The MPI library (`MPI_Get_library_version`).
    pub mpi_library: String,
    /// The NCCL release, where NCCL was loaded.
    pub nccl_version: Option<String>,
    /// The subcommand (`allreduce`, `coll`, `p2p`, ...).
    pub benchmark: String,
    /// What was measured: a collective's name (`allreduce`, ...) or a point-to-point test
    /// (`latency`, `bw`, `bibw`, `mbw_mr`).
    pub collective: String,
    /// The backend (`mpi`, `mpi-staged`, `cuda-mpi`, `nccl`).
    pub backend: String,
    /// Which call was timed: `library` (the library's call), `raw` (the backend's own call on the
    /// same handle and buffers), `checked` (the library's call with checked mode on).
    pub variant: String,
    /// `out-of-place` or `in-place` (collectives), `-` (point-to-point).
    pub placement: String,
    /// Element type (`float`, ...; `byte` for point-to-point).
    pub dtype: String,
    /// Reduce operation of reducing collectives.
    pub op: Option<String>,
    /// Root of rooted collectives.
    pub root: Option<usize>,
    /// Ranks of the run.
    pub ranks: usize,
    /// Size in bytes, as nccl-tests (collectives) or OSU (point-to-point) counts it.
    pub size_bytes: u64,
    /// Elements.
    pub count: u64,
    /// Time per call: the average over ranks (or as `-a` picks).
    pub time_us: f64,
    /// The fastest rank's time per call.
    pub time_min_us: f64,
    /// The slowest rank's time per call.
    pub time_max_us: f64,
    /// Timed calls per rank.
    pub iterations: u64,
    /// `size / time`; absent where no bandwidth is measured (`overlap`).
    pub algbw_gbps: Option<f64>,
    /// `algbw` times the collective's bus-bandwidth factor; absent as `algbw_gbps` is.
    pub busbw_gbps: Option<f64>,
    /// Wrong elements (bytes, point-to-point) summed over ranks; absent without `-c 1`.
    pub wrong: Option<u64>,
    /// The fastest iteration (each iteration's time is the slowest rank's).
    pub iter_min_us: Option<f64>,
    /// The median iteration.
    pub iter_p50_us: Option<f64>,
    /// The 99th-percentile iteration.
    pub iter_p99_us: Option<f64>,
    /// Messages per second (OSU's `osu_mbw_mr`), where measured.
    pub messages_per_s: Option<f64>,
    /// What else sets the measurement apart, as `key=value` pairs joined by `;`, where the
    /// benchmark has more settings than the fields above (`halo`: shape, neighbours, pipeline
    /// depth; `pack`: the layout).
    #[serde(default)]
    pub config: Option<String>,
    /// Device memory the measured call needs, bytes per rank, where reported (`allgatherv`).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// `collbench overlap`'s measurements; every field absent (`null`) in other records.
    #[serde(flatten, default)]
    pub overlap: Overlap,
}

/// What `collbench overlap` measures of one collective and size (OSU's `osu_i*` columns), in
/// microseconds averaged over ranks; in a record of `overlap` the record's `time_us` is the pure
/// communication time (`pure_us`) and its bandwidths are absent. Every field is absent in the
/// records of other benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overlap {
    /// The library's progress engine on the measured communicator: `on`, `off` (host buffers).
    pub progress: Option<String>,
    /// Start to the end of the wait, with the computation in between.
    pub overall_us: Option<f64>,
    /// The computation, without the tests made during it.
    pub compute_us: Option<f64>,
    /// Start and wait at once.
    pub pure_us: Option<f64>,
    /// OSU's overlap: `max(0, 100 - (overall - compute) / pure x 100)`.
    pub overlap_pct: Option<f64>,
    /// Inside the tests made during the computation (`-t`).
    pub test_us: Option<f64>,
    /// Inside the wait.
    pub wait_us: Option<f64>,
    /// With `--efficiency`: the computation at which the overlap first reached `--hidden`; absent
    /// when it never did.
    pub hidden_at_us: Option<f64>,
    /// With `--efficiency`: that computation as a multiple of the pure time.
    pub hidden_factor: Option<u32>,
}

impl Record {
    /// The CSV columns, in order: every field of the record.
    pub const COLUMNS: [&'static str; 38] = [
        "host",
        "cores",
        "mpi_library",
        "nccl_version",
        "benchmark",
        "collective",
        "backend",
        "variant",
        "placement",
        "dtype",
        "op",
        "root",
        "ranks",
        "size_bytes",
        "count",
        "time_us",
        "time_min_us",
        "time_max_us",
        "iterations",
        "algbw_gbps",
        "busbw_gbps",
        "wrong",
        "iter_min_us",
        "iter_p50_us",
        "iter_p99_us",
        "messages_per_s",
        "config",
        "memory_bytes",
        "progress",
        "overall_us",
        "compute_us",
        "pure_us",
        "overlap_pct",
        "test_us",
        "wait_us",
        "hidden_at_us",
        "hidden_factor",
        // Kept last: a column added later goes before it.
        "schema",
    ];

    /// The CSV header line (no line break).
    pub fn csv_header() -> String {
        Self::COLUMNS.join(",")
    }

    /// This record as a CSV line (no line break): one cell per [`COLUMNS`](Self::COLUMNS) entry.
    pub fn csv_line(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or_default();
        Self::COLUMNS
            .iter()
            .map(|k| match (*k, value.get(k)) {
                ("schema", _) => SCHEMA.to_string(),
                (_, Some(serde_json::Value::String(s))) => csv_escape(s),
                (_, Some(serde_json::Value::Null) | None) => String::new(),
                (_, Some(v)) => v.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Record {
    /// A record of `collective` measured by `benchmark` on `backend` on `machine`, variant
    /// `library`, placement `-`, every measurement empty: the benchmark fills in the rest.
    pub fn new(machine: &Machine, benchmark: &str, collective: &str, backend: &str) -> Record {
        Record {
            host: machine.host.clone(),
            cores: machine.cores,
            mpi_library: machine.mpi_library.clone(),
            nccl_version: machine.nccl_version.clone(),
            benchmark: benchmark.into(),
            collective: collective.into(),
            backend: backend.into(),
            variant: "library".into(),
            placement: "-".into(),
            ..Record::default()
        }
    }

    /// This record with `time_us` (and the fastest and slowest rank's, where one figure stands for
    /// all ranks) set to `us`, and `algbw` and `busbw` to `size_bytes / time` times `factor` (busbw).
    pub fn timed(mut self, us: f64, factor: f64) -> Record {
        let t = rounded(us, 3);
        (self.time_us, self.time_min_us, self.time_max_us) = (t, t, t);
        let algbw = if us > 0.0 {
            self.size_bytes as f64 / us / 1e3
        } else {
            0.0
        };
        self.algbw_gbps = Some(rounded(algbw, 4));
        self.busbw_gbps = Some(rounded(algbw * factor, 4));
        self
    }
}

/// `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns with a `#` header, like nccl-tests.
    Table,
    /// One header line, then one record per line ([`Record::COLUMNS`]).
    Csv,
    /// One JSON document: the run's settings and its records ([`Document`]).
    Json,
    /// The OSU micro-benchmarks' tables (`--osu` selects it, with OSU's flags).
    Osu,
}

/// Statistics over the timed iterations of one size, in seconds: each iteration's time is the slowest
/// rank's, then the fastest iteration, the median and the 99th percentile are taken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterStats {
    /// Fastest iteration.
    pub min: f64,
    /// Median iteration.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
}

impl IterStats {
    /// The statistics of `times` (seconds per iteration); all zero when there are none.
    pub fn of(times: &[f64]) -> Self {
        let mut v: Vec<f64> = times.iter().copied().filter(|t| !t.is_nan()).collect();
        if v.is_empty() {
            return IterStats {
                min: 0.0,
                p50: 0.0,
                p99: 0.0,
            };
        }
        v.sort_by(f64::total_cmp);
        // Nearest rank: the smallest value with at least p% of the values at or below it.
        let pct = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        IterStats {
            min: v[0],
            p50: pct(50.0),
            p99: pct(99.0),
        }
    }
}

/// One placement's measurements (out-of-place or in-place). Times are in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Placement {
    /// Time per call.
    pub time: Spread,
    /// Algorithm bandwidth, GB/s.
    pub algbw: f64,
    /// Bus bandwidth, GB/s.
    pub busbw: f64,
    /// Wrong elements summed over ranks; `None` without `-c 1`.
    pub wrong: Option<u64>,
    /// Per-iteration statistics, where the run took them.
    pub iter: Option<IterStats>,
}

/// One line of results: one size of one type, operation, backend and variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Backend name.
    pub backend: &'static str,
    /// Which call was timed ([`crate::measure::variant::Variant::name`]).
    pub variant: &'static str,
    /// Bytes per rank (`count` times the element size).
    pub size: usize,
    /// Elements per rank.
    pub count: usize,
    /// Type name (`float`, `complex128`, ...).
    pub dtype: &'static str,
    /// Operation name (`sum`, ...; `none` where nothing is reduced).
    pub redop: &'static str,
    /// Root rank, `-1` where there is none.
    pub root: i64,
    /// Out-of-place measurements (the collective's only form where it has one form).
    pub oop: Placement,
    /// In-place measurements; meaningful only when `in_place`.
    pub ip: Placement,
    /// Whether the collective has an in-place form (otherwise the in-place columns read N/A).
    pub in_place: bool,
}

/// Time in microseconds as nccl-tests prints it: 2 decimals below 100 us, 1 below 10 ms, none above.
pub fn fmt_time_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{us:.0}")
    } else if us >= 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// A finite number rounded to `decimals` decimals (so that CSV and JSON stay short); 0 otherwise.
pub fn rounded(x: f64, decimals: i32) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    let k = 10f64.powi(decimals);
    (x * k).round() / k
}

/// Where rank 0 writes: the file of `--output`, else standard output; nothing on other ranks.
///
/// # Errors
/// The file cannot be created.
pub fn output(rank: i32, path: Option<&std::path::Path>) -> anyhow::Result<Option<Box<dyn Write>>> {
    if rank != 0 {
        return Ok(None);
    }
    Ok(Some(match path {
        Some(p) => Box::new(io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(io::stdout()),
    }))
}

/// The records of a benchmark whose human table is its own (`p2p`, `halo`, `overlap`, `pack`,
/// `allgatherv`), under its [`Sink`](crate::output::sink::Sink): CSV lines as the records come, or
/// the JSON document once they all have; nothing for a table, whose lines the sink writes.
#[derive(Debug)]
pub struct Emitter {
    format: Format,
    doc: Document,
}

impl Emitter {
    /// An emitter of `doc`'s records (usually none yet) as `format` says.
    pub fn new(format: Format, doc: Document) -> Self {
        Emitter { format, doc }
    }

    /// Whether the benchmark writes its own table (`--format table`, or `osu`, which such a
    /// benchmark does not have).
    pub fn table(&self) -> bool {
        matches!(self.format, Format::Table | Format::Osu)
    }

    /// The format it writes.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The document: settings, notes, and the records kept for JSON.
    pub fn doc(&self) -> &Document {
        &self.doc
    }

    /// The document, to add settings, notes and the like before the records come.
    pub fn doc_mut(&mut self) -> &mut Document {
        &mut self.doc
    }

    /// Writes what comes before the records: the CSV header.
    ///
    /// # Errors
    /// `out`'s.
    pub fn begin(&self, out: &mut dyn Write) -> io::Result<()> {
        if self.format == Format::Csv {
            writeln!(out, "{}", Record::csv_header())?;
        }
        Ok(())
    }

    /// Takes `records`: written at once as CSV lines, kept for the JSON document.
    ///
    /// # Errors
    /// `out`'s.
    pub fn emit(&mut self, out: &mut dyn Write, records: Vec<Record>) -> io::Result<()> {
        match self.format {
            Format::Csv => {
                for r in &records {
                    writeln!(out, "{}", r.csv_line())?;
                }
                out.flush()
            }
            Format::Json => {
                self.doc.records.extend(records);
                Ok(())
            }
            Format::Table | Format::Osu => Ok(()),
        }
    }

    /// Writes what comes after the records: the JSON document.
    ///
    /// # Errors
    /// `out`'s.
    pub fn finish(self, out: &mut dyn Write) -> io::Result<()> {
        if self.format == Format::Json {
            write!(out, "{}", self.doc.to_json())?;
        }
        out.flush()
    }
}

/// `s` as a CSV field: quoted (with inner quotes doubled) when it holds a comma, quote or line break.
pub fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A run's JSON output: its settings, what it noted, and its records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Document {
    /// [`SCHEMA`].
    pub schema: String,
    /// The subcommand.
    pub benchmark: String,
    /// Ranks of the run.
    pub ranks: usize,
    /// What the run ran on.
    pub machine: Machine,
    /// Backends that ran.
    pub backends: Vec<String>,
    /// The run's settings as `-b`, `-e`, step, `-w`, `-n`, `-c` and the like, by flag name.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// How times were taken and bandwidths computed.
    pub method: Vec<String>,
    /// Things left out, and why.
    pub notes: Vec<String>,
    /// Facts learnt as backends started (library releases, devices).
    pub environment: Vec<String>,
    /// The measurements.
    pub records: Vec<Record>,
}

impl Document {
    /// An empty document of `benchmark` on `ranks` ranks of `machine`.
    pub fn new(benchmark: &str, ranks: usize, machine: Machine) -> Self {
        Document {
            schema: SCHEMA.into(),
            benchmark: benchmark.into(),
            ranks,
            machine,
            backends: Vec::new(),
            settings: serde_json::Map::new(),
            method: Vec::new(),
            notes: Vec::new(),
            environment: Vec::new(),
            records: Vec::new(),
        }
    }

    /// This document with `settings` (flag name, value) added.
    pub fn with_settings<'a>(
        mut self,
        settings: impl IntoIterator<Item = (&'a str, serde_json::Value)>,
    ) -> Self {
        self.settings
            .extend(settings.into_iter().map(|(k, v)| (k.to_string(), v)));
        self
    }

    /// The document as pretty-printed JSON, ending with a line break.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// A document from its JSON text.
    ///
    /// # Errors
    /// Text that is not a document of this schema.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let doc: Document = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if doc.schema != SCHEMA {
            return Err(format!(
                "schema `{}` is not `{SCHEMA}` (written by another collbench)",
                doc.schema
            ));
        }
        Ok(doc)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `us` microseconds on every rank, nothing wrong, no bandwidths.
    pub fn placement_us(us: f64) -> Placement {
        Placement {
            time: Spread::uniform(us * 1e-6),
            wrong: Some(0),
            ..Placement::default()
        }
    }

    /// A row of `mpi`'s `library` all-reduce of `size` bytes of `float` (`size / 4` elements),
    /// taking `us` microseconds in both placements ([`placement_us`]).
    pub fn row_us(size: usize, us: f64) -> Row {
        Row {
            backend: "mpi",
            variant: "library",
            size,
            count: size / 4,
            dtype: "float",
            redop: "sum",
            root: -1,
            oop: placement_us(us),
            ip: placement_us(us),
            in_place: true,
        }
    }

    /// A record with every optional field set.
    pub fn record() -> Record {
        Record {
            host: "node1".into(),
            cores: 2,
            mpi_library: "Open MPI v4.1.4, package: Debian OpenMPI".into(),
            nccl_version: Some("2.21.5".into()),
            benchmark: "allreduce".into(),
            collective: "allreduce".into(),
            backend: "mpi".into(),
            variant: "library".into(),
            placement: "out-of-place".into(),
            dtype: "float".into(),
            op: Some("sum".into()),
            root: None,
            ranks: 2,
            size_bytes: 1024,
            count: 256,
            time_us: 10.25,
            time_min_us: 9.5,
            time_max_us: 11.0,
            iterations: 20,
            algbw_gbps: Some(0.0999),
            busbw_gbps: Some(0.0999),
            wrong: Some(0),
            iter_min_us: Some(9.0),
            iter_p50_us: Some(10.0),
            iter_p99_us: Some(12.0),
            messages_per_s: None,
            config: None,
            memory_bytes: None,
            overlap: Overlap::default(),
        }
    }

    /// A record of `collbench overlap`.
    pub fn overlap_record() -> Record {
        let mut r = record();
        r.benchmark = "overlap".into();
        (r.algbw_gbps, r.busbw_gbps, r.wrong) = (None, None, None);
        (r.iter_min_us, r.iter_p50_us, r.iter_p99_us) = (None, None, None);
        r.overlap = Overlap {
            progress: Some("on".into()),
            overall_us: Some(12.5),
            compute_us: Some(10.0),
            pure_us: Some(10.25),
            overlap_pct: Some(75.61),
            test_us: Some(0.0),
            wait_us: Some(2.0),
            hidden_at_us: Some(40.0),
            hidden_factor: Some(4),
        };
        r
    }

    #[test]
    fn json_round_trip() {
        let doc = Document {
            schema: SCHEMA.into(),
            benchmark: "allreduce".into(),
            ranks: 2,
            machine: Machine::default(),
            backends: vec!["mpi".into()],
            settings: [("minbytes".to_string(), serde_json::json!(8))]
                .into_iter()
                .collect(),
            method: vec!["time: wall clock".into()],
            notes: vec!["nccl: not available: \"no\" driver".into()],
            environment: Vec::new(),
            records: vec![record(), overlap_record(), {
                let mut r = record();
                r.wrong = None;
                r.op = None;
                r.root = Some(3);
                r.placement = "in-place".into();
                r
            }],
        };
        let text = doc.to_json();
        assert_eq!(Document::from_json(&text).unwrap(), doc);
        assert!(text.contains("\"wrong\": null"));
        // Overlap fields sit beside the others, null outside overlap records.
        assert!(text.contains("\"overlap_pct\": 75.61"), "{text}");
        assert!(text.contains("\"overlap_pct\": null"));
        assert!(text.contains("\"busbw_gbps\": null"));
        // A document written before the overlap fields existed still reads.
        let old: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut old = old;
        for r in old["records"].as_array_mut().unwrap() {
            for k in ["progress", "overall_us", "pure_us", "hidden_factor"] {
                r.as_object_mut().unwrap().remove(k);
            }
        }
        let read = Document::from_json(&old.to_string()).unwrap();
        assert_eq!(read.records[0], doc.records[0]);
        assert_eq!(read.records[1].overlap.overall_us, None);
        assert_eq!(read.records[1].overlap.compute_us, Some(10.0));
        let other = text.replace(SCHEMA, "collbench-results/0");
        assert!(Document::from_json(&other).unwrap_err().contains("schema"));
        assert!(Document::from_json("{").is_err());
    }

    #[test]
    fn csv_has_one_cell_per_field() {
        let value = serde_json::to_value(record()).unwrap();
        let mut fields: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.push("schema");
        fields.sort_unstable();
        let mut columns = Record::COLUMNS.to_vec();
        columns.sort_unstable();
        assert_eq!(fields, columns, "every field is a column, once");
        let line = record().csv_line();
        assert_eq!(
            line,
            "node1,2,\"Open MPI v4.1.4, package: Debian OpenMPI\",2.21.5,allreduce,allreduce,mpi,\
             library,out-of-place,float,sum,,2,1024,256,10.25,9.5,11.0,20,0.0999,0.0999,0,9.0,10.0,\
             12.0,,,,,,,,,,,,,collbench-results/1"
        );
        let line = overlap_record().csv_line();
        assert!(
            line.ends_with(",,,,,,,on,12.5,10.0,10.25,75.61,0.0,2.0,40.0,4,collbench-results/1"),
            "{line}"
        );
        assert_eq!(
            Record::csv_header().split(',').count(),
            Record::COLUMNS.len()
        );
        assert_eq!(csv_escape("a\"b"), "\"a\"\"b\"");
    }
}
