//! Output: an aligned table in the manner of nccl-tests, CSV, or JSON.
//!
//! Table and CSV rows are written as each size finishes; JSON is written as one document at the end.
//! CSV and JSON carry every field (min and max over ranks included); the table shows the min and max
//! columns with `--minmax`. Notes (backends or combinations left out) are `#` lines in the table, an array
//! in JSON, and lines on standard error with CSV, so that standard output stays plain CSV.

use std::io::{self, Write};

use crate::timing::Spread;

/// `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns with a `#` header, like nccl-tests.
    Table,
    /// One header line, then one line per row.
    Csv,
    /// One JSON document: the run's settings and a flat list of rows.
    Json,
}

/// Which optional columns a run has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// Min and max over ranks in the table (always in CSV and JSON).
    pub minmax: bool,
    /// The raw baseline (`MPI_Allreduce`, `ncclAllReduce`).
    pub baseline: bool,
    /// The time with checked mode on, and its cost.
    pub checked_cost: bool,
    /// Per-iteration statistics (min, p50, p99 of the slowest rank's time per iteration): in CSV and
    /// JSON, and in the table with `minmax`.
    pub iter_stats: bool,
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
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placement {
    /// Time per call through the library.
    pub time: Spread,
    /// Algorithm bandwidth, GB/s.
    pub algbw: f64,
    /// Bus bandwidth, GB/s.
    pub busbw: f64,
    /// Wrong elements summed over ranks; `None` without `-c 1`.
    pub wrong: Option<u64>,
    /// Time per call of the raw baseline (`MPI_Allreduce`, `ncclAllReduce`).
    pub raw: Option<Spread>,
    /// Time per call through the library with checked mode on.
    pub checked_on: Option<Spread>,
    /// Per-iteration statistics, where the run took them.
    pub iter: Option<IterStats>,
}

/// One line of results: one size of one type, operation and backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Backend name.
    pub backend: &'static str,
    /// Bytes per rank (`count` times the element size).
    pub size: usize,
    /// Elements per rank.
    pub count: usize,
    /// Type name (`float`, `complex128`, ...).
    pub dtype: &'static str,
    /// Operation name (`sum`, ...).
    pub redop: &'static str,
    /// Root rank, `-1` where there is none (all-reduce).
    pub root: i64,
    /// Out-of-place measurements (the collective's only form where it has one form).
    pub oop: Placement,
    /// In-place measurements; meaningful only when `in_place`.
    pub ip: Placement,
    /// Whether the collective has an in-place form (otherwise the in-place columns read N/A).
    pub in_place: bool,
}

/// The run's settings, printed in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// Benchmark name (`allreduce`).
    pub benchmark: &'static str,
    /// Number of ranks.
    pub nranks: usize,
    /// Backends that run.
    pub backends: Vec<&'static str>,
    /// Checked mode of the measured communicator.
    pub checked: bool,
    /// `-b`.
    pub min_bytes: usize,
    /// `-e`.
    pub max_bytes: usize,
    /// The step, as [`crate::sizes::Step::describe`] writes it.
    pub step: String,
    /// `-w`.
    pub warmup_iters: usize,
    /// `-n`.
    pub iters: usize,
    /// `-c`.
    pub check: bool,
    /// Things left out, and why.
    pub notes: Vec<String>,
    /// What the run ran on (library versions, devices), added as backends start
    /// ([`Reporter::environment`]).
    pub environment: Vec<String>,
}

const US: f64 = 1e6;

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

/// A field of a CSV or JSON row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// An integer.
    Int(i128),
    /// A number with this many decimals.
    Num(f64, usize),
    /// A boolean.
    Bool(bool),
    /// No value (empty in CSV, `null` in JSON).
    Missing,
}

impl Value {
    fn csv(&self) -> String {
        match self {
            Value::Str(s) => csv_escape(s),
            Value::Int(i) => i.to_string(),
            Value::Num(x, d) if x.is_finite() => format!("{x:.d$}"),
            Value::Num(..) | Value::Missing => String::new(),
            Value::Bool(b) => b.to_string(),
        }
    }

    fn json(&self) -> String {
        match self {
            Value::Str(s) => json_string(s),
            Value::Int(i) => i.to_string(),
            Value::Num(x, d) if x.is_finite() => format!("{x:.d$}"),
            Value::Num(..) | Value::Missing => "null".to_string(),
            Value::Bool(b) => b.to_string(),
        }
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

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn spread_fields(out: &mut Vec<(String, Value)>, prefix: &str, s: &Spread) {
    out.push((format!("{prefix}time_us"), Value::Num(s.avg * US, 3)));
    out.push((format!("{prefix}time_min_us"), Value::Num(s.min * US, 3)));
    out.push((format!("{prefix}time_max_us"), Value::Num(s.max * US, 3)));
}

/// The fields of `row` for CSV and JSON, in column order.
pub fn fields(row: &Row, cols: Columns) -> Vec<(String, Value)> {
    let mut f = vec![
        ("backend".to_string(), Value::Str(row.backend.to_string())),
        ("size_bytes".to_string(), Value::Int(row.size as i128)),
        ("count".to_string(), Value::Int(row.count as i128)),
        ("type".to_string(), Value::Str(row.dtype.to_string())),
        ("redop".to_string(), Value::Str(row.redop.to_string())),
        ("root".to_string(), Value::Int(row.root.into())),
    ];
    for (p, m) in [("oop_", &row.oop), ("ip_", &row.ip)] {
        if p == "ip_" && !row.in_place {
            // The same columns, empty: one schema whatever the collective.
            let n = fields_of_placement(cols);
            let names: Vec<String> = csv_placement_names(cols);
            debug_assert_eq!(names.len(), n);
            f.extend(
                names
                    .into_iter()
                    .map(|k| (format!("ip_{k}"), Value::Missing)),
            );
            continue;
        }
        spread_fields(&mut f, p, &m.time);
        f.push((format!("{p}algbw_gbps"), Value::Num(m.algbw, 4)));
        f.push((format!("{p}busbw_gbps"), Value::Num(m.busbw, 4)));
        f.push((
            format!("{p}wrong"),
            m.wrong.map_or(Value::Missing, |w| Value::Int(w.into())),
        ));
        if cols.iter_stats {
            for (name, v) in [
                ("iter_min_us", m.iter.map(|i| i.min)),
                ("iter_p50_us", m.iter.map(|i| i.p50)),
                ("iter_p99_us", m.iter.map(|i| i.p99)),
            ] {
                f.push((
                    format!("{p}{name}"),
                    v.map_or(Value::Missing, |t| Value::Num(t * US, 3)),
                ));
            }
        }
        if cols.baseline {
            match &m.raw {
                Some(raw) => {
                    spread_fields(&mut f, &format!("{p}raw_"), raw);
                    f.push((
                        format!("{p}overhead_us"),
                        Value::Num((m.time.avg - raw.avg) * US, 3),
                    ));
                    f.push((format!("{p}ratio"), Value::Num(m.time.avg / raw.avg, 4)));
                }
                None => {
                    for name in [
                        "raw_time_us",
                        "raw_time_min_us",
                        "raw_time_max_us",
                        "overhead_us",
                        "ratio",
                    ] {
                        f.push((format!("{p}{name}"), Value::Missing));
                    }
                }
            }
        }
        if cols.checked_cost {
            match &m.checked_on {
                Some(on) => {
                    spread_fields(&mut f, &format!("{p}checked_on_"), on);
                    f.push((
                        format!("{p}checked_cost_us"),
                        Value::Num((on.avg - m.time.avg) * US, 3),
                    ));
                }
                None => {
                    for name in [
                        "checked_on_time_us",
                        "checked_on_time_min_us",
                        "checked_on_time_max_us",
                        "checked_cost_us",
                    ] {
                        f.push((format!("{p}{name}"), Value::Missing));
                    }
                }
            }
        }
    }
    f
}

fn empty_placement() -> Placement {
    Placement {
        time: Spread::uniform(0.0),
        algbw: 0.0,
        busbw: 0.0,
        wrong: None,
        raw: None,
        checked_on: None,
        iter: None,
    }
}

fn empty_row() -> Row {
    Row {
        backend: "",
        size: 0,
        count: 0,
        dtype: "",
        redop: "",
        root: 0,
        oop: empty_placement(),
        ip: empty_placement(),
        in_place: true,
    }
}

/// The names of one placement's fields, without the `oop_`/`ip_` prefix.
fn csv_placement_names(cols: Columns) -> Vec<String> {
    fields(&empty_row(), cols)
        .into_iter()
        .filter_map(|(k, _)| k.strip_prefix("oop_").map(str::to_string))
        .collect()
}

fn fields_of_placement(cols: Columns) -> usize {
    csv_placement_names(cols).len()
}

/// The CSV header line (no line break).
pub fn csv_header(cols: Columns) -> String {
    fields(&empty_row(), cols)
        .into_iter()
        .map(|(k, _)| k)
        .collect::<Vec<_>>()
        .join(",")
}

/// `row` as a CSV line (no line break).
pub fn csv_row(row: &Row, cols: Columns) -> String {
    fields(row, cols)
        .iter()
        .map(|(_, v)| v.csv())
        .collect::<Vec<_>>()
        .join(",")
}

/// `row` as a JSON object on one line.
pub fn json_row(row: &Row, cols: Columns) -> String {
    let body: Vec<String> = fields(row, cols)
        .iter()
        .map(|(k, v)| format!("{}: {}", json_string(k), v.json()))
        .collect();
    format!("{{{}}}", body.join(", "))
}

/// The whole JSON document: settings, notes and rows.
pub fn json_document(meta: &Meta, cols: Columns, rows: &[Row]) -> String {
    let strings = |v: &[&str]| {
        format!(
            "[{}]",
            v.iter()
                .map(|s| json_string(s))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let notes: Vec<&str> = meta.notes.iter().map(String::as_str).collect();
    let environment: Vec<&str> = meta.environment.iter().map(String::as_str).collect();
    let head = [
        ("benchmark", json_string(meta.benchmark)),
        ("nranks", meta.nranks.to_string()),
        ("backends", strings(&meta.backends)),
        ("checked", meta.checked.to_string()),
        ("minbytes", meta.min_bytes.to_string()),
        ("maxbytes", meta.max_bytes.to_string()),
        ("step", json_string(&meta.step)),
        ("warmup_iters", meta.warmup_iters.to_string()),
        ("iters", meta.iters.to_string()),
        ("check", meta.check.to_string()),
        ("time", json_string(TIME_NOTE)),
        (
            "busbw_factor",
            json_string(busbw_factor_text(meta.benchmark)),
        ),
        (
            "baseline",
            if cols.baseline {
                json_string(BASELINE_NOTE)
            } else {
                "null".to_string()
            },
        ),
        (
            "checked_cost",
            if cols.checked_cost {
                json_string(CHECKED_COST_NOTE)
            } else {
                "null".to_string()
            },
        ),
        ("notes", strings(&notes)),
        ("environment", strings(&environment)),
    ];
    let mut s = String::from("{\n");
    for (k, v) in head {
        s.push_str(&format!("  {}: {},\n", json_string(k), v));
    }
    s.push_str("  \"rows\": [");
    for (i, row) in rows.iter().enumerate() {
        s.push_str(if i == 0 { "\n    " } else { ",\n    " });
        s.push_str(&json_row(row, cols));
    }
    s.push_str(if rows.is_empty() {
        "]\n}\n"
    } else {
        "\n  ]\n}\n"
    });
    s
}

/// How times are taken.
pub const TIME_NOTE: &str =
    "per call: each rank times -n calls after -w warm-up calls and a barrier \
     (wall clock for mpi; CUDA events on the communicator's stream for nccl) and divides by -n, \
     then the average (min, max) is taken over ranks";
/// The all-reduce bus-bandwidth factor.
pub const BUSBW_FACTOR: &str = "2(n-1)/n";

/// The bus-bandwidth factor of benchmark `name`, as text (`2(n-1)/n` for all-reduce; see
/// [`crate::coll`] for the table).
pub fn busbw_factor_text(name: &str) -> &'static str {
    crate::coll::CollName::from_name(name).map_or(BUSBW_FACTOR, |c| c.busbw_text())
}
/// What the baseline is.
pub const BASELINE_NOTE: &str = "the backend's all-reduce called directly on the same communicator handle and \
     buffers (mpi: MPI_Allreduce through mpi::ffi; nccl: ncclAllReduce through nccl_sys on the same stream, \
     timed with the same events), interleaved with ours per size; overhead = ours - raw (us per call), \
     ratio = ours / raw";
/// What the checked-mode cost is.
pub const CHECKED_COST_NOTE: &str =
    "the same calls on a second communicator with checked mode on, interleaved per \
                                     size; cost = checked on - checked off (us per call)";

/// The `#` header lines of the table, before the column names.
pub fn table_preamble(meta: &Meta, cols: Columns) -> Vec<String> {
    let mut v = vec![
        format!(
            "# collbench {}: nranks {}, backend {}, checked {}",
            meta.benchmark,
            meta.nranks,
            meta.backends.join(","),
            if meta.checked { "on" } else { "off" }
        ),
        "#".to_string(),
        format!(
            "#  minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} validation: {}",
            meta.min_bytes,
            meta.max_bytes,
            meta.step,
            meta.warmup_iters,
            meta.iters,
            u8::from(meta.check)
        ),
        format!("#  time: {TIME_NOTE}"),
        format!(
            "#  algbw = size / time; busbw = algbw * {} for {} (bus bandwidth, as in nccl-tests' \
             PERFORMANCE.md; 1 GB = 1e9 bytes)",
            busbw_factor_text(meta.benchmark),
            meta.benchmark,
        ),
    ];
    if cols.baseline {
        v.push(format!("#  baseline: {BASELINE_NOTE}"));
    }
    if cols.checked_cost {
        v.push(format!("#  checked cost: {CHECKED_COST_NOTE}"));
    }
    for n in &meta.notes {
        v.push(format!("#  note: {n}"));
    }
    v.push("#".to_string());
    v
}

struct Col {
    /// 0: key columns, 1: out-of-place, 2: in-place.
    group: usize,
    name: &'static str,
    unit: &'static str,
    width: usize,
}

fn table_columns(cols: Columns) -> Vec<Col> {
    let c = |group, name, unit, width| Col {
        group,
        name,
        unit,
        width,
    };
    let mut v = vec![
        c(0, "size", "(B)", 12),
        c(0, "count", "(elements)", 12),
        c(0, "type", "", 10),
        c(0, "redop", "", 6),
        c(0, "root", "", 5),
    ];
    for g in [1, 2] {
        v.push(c(g, "time", "(us)", 9));
        if cols.minmax {
            v.push(c(g, "min", "(us)", 9));
            v.push(c(g, "max", "(us)", 9));
        }
        if cols.iter_stats {
            v.push(c(g, "it-min", "(us)", 9));
            v.push(c(g, "p50", "(us)", 9));
            v.push(c(g, "p99", "(us)", 9));
        }
        v.push(c(g, "algbw", "(GB/s)", 8));
        v.push(c(g, "busbw", "(GB/s)", 8));
        v.push(c(g, "#wrong", "", 6));
        if cols.baseline {
            v.push(c(g, "raw", "(us)", 9));
            v.push(c(g, "ovh", "(us)", 9));
            v.push(c(g, "ratio", "", 6));
        }
        if cols.checked_cost {
            v.push(c(g, "chk-on", "(us)", 9));
            v.push(c(g, "cost", "(us)", 9));
        }
    }
    v
}

fn line(first: char, cells: &[String], widths: &[usize]) -> String {
    let mut s = String::new();
    s.push(first);
    for (cell, w) in cells.iter().zip(widths) {
        s.push(' ');
        s.push_str(&format!("{cell:>w$}"));
    }
    s.trim_end().to_string()
}

/// The three `#` lines naming the table's columns (group, name, unit).
pub fn table_header(cols: Columns) -> Vec<String> {
    let columns = table_columns(cols);
    let widths: Vec<usize> = columns.iter().map(|c| c.width).collect();
    let names: Vec<String> = columns.iter().map(|c| c.name.to_string()).collect();
    let units: Vec<String> = columns.iter().map(|c| c.unit.to_string()).collect();
    // The group line: each group's label centred over its columns.
    let mut group = vec![' '; 1 + widths.iter().map(|w| w + 1).sum::<usize>()];
    group[0] = '#';
    for (g, label) in [(1, "out-of-place"), (2, "in-place")] {
        let mut start = 1;
        let mut span = 0;
        for c in &columns {
            if c.group < g {
                start += c.width + 1;
            } else if c.group == g {
                span += c.width + 1;
            }
        }
        let at = start + span.saturating_sub(label.len()) / 2;
        for (k, ch) in label.chars().enumerate() {
            if let Some(slot) = group.get_mut(at + k) {
                *slot = ch;
            }
        }
    }
    vec![
        group.into_iter().collect::<String>().trim_end().to_string(),
        line('#', &names, &widths),
        line('#', &units, &widths),
    ]
}

fn placement_cells(m: &Placement, cols: Columns) -> Vec<String> {
    let mut v = vec![fmt_time_us(m.time.avg * US)];
    if cols.minmax {
        v.push(fmt_time_us(m.time.min * US));
        v.push(fmt_time_us(m.time.max * US));
    }
    if cols.iter_stats {
        let it =
            |f: fn(&IterStats) -> f64| m.iter.map_or("-".to_string(), |i| fmt_time_us(f(&i) * US));
        v.push(it(|i| i.min));
        v.push(it(|i| i.p50));
        v.push(it(|i| i.p99));
    }
    v.push(format!("{:.2}", m.algbw));
    v.push(format!("{:.2}", m.busbw));
    v.push(m.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string()));
    if cols.baseline {
        match &m.raw {
            Some(raw) => {
                v.push(fmt_time_us(raw.avg * US));
                v.push(format!("{:.2}", (m.time.avg - raw.avg) * US));
                v.push(if raw.avg > 0.0 {
                    format!("{:.2}", m.time.avg / raw.avg)
                } else {
                    "-".to_string()
                });
            }
            None => v.extend(["-", "-", "-"].map(String::from)),
        }
    }
    if cols.checked_cost {
        match &m.checked_on {
            Some(on) => {
                v.push(fmt_time_us(on.avg * US));
                v.push(format!("{:.2}", (on.avg - m.time.avg) * US));
            }
            None => v.extend(["-", "-"].map(String::from)),
        }
    }
    v
}

/// `row` as an aligned table line.
pub fn table_row(row: &Row, cols: Columns) -> String {
    let widths: Vec<usize> = table_columns(cols).iter().map(|c| c.width).collect();
    let mut cells = vec![
        row.size.to_string(),
        row.count.to_string(),
        row.dtype.to_string(),
        row.redop.to_string(),
        row.root.to_string(),
    ];
    cells.extend(placement_cells(&row.oop, cols));
    let ip = placement_cells(&row.ip, cols);
    if row.in_place {
        cells.extend(ip);
    } else {
        cells.extend(ip.iter().map(|_| "N/A".to_string()));
    }
    line(' ', &cells, &widths)
}

/// Writes a run's output on rank 0; on other ranks it has no writer and writes nothing.
///
/// Writing never interrupts the run (every rank must keep making the same calls): the first write error
/// stops the output and is returned by [`finish`](Self::finish).
#[derive(Debug)]
pub struct Reporter<W: Write> {
    out: Option<W>,
    error: Option<io::Error>,
    format: Format,
    cols: Columns,
    meta: Meta,
    rows: Vec<Row>,
}

impl<W: Write> Reporter<W> {
    /// A reporter writing to `out` (`None` on ranks that print nothing).
    pub fn new(out: Option<W>, format: Format, cols: Columns, meta: Meta) -> Self {
        Reporter {
            out,
            error: None,
            format,
            cols,
            meta,
            rows: Vec::new(),
        }
    }

    fn write(&mut self, f: impl FnOnce(&mut W) -> io::Result<()>) {
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = f(out).and_then(|()| out.flush()) {
                self.error = Some(e);
                self.out = None;
            }
        }
    }

    /// Write the header (table, CSV) and the notes (CSV: on standard error).
    pub fn begin(&mut self) {
        let (format, cols) = (self.format, self.cols);
        let lines: Vec<String> = match format {
            Format::Table => table_preamble(&self.meta, cols)
                .into_iter()
                .chain(table_header(cols))
                .collect(),
            Format::Csv => {
                if self.out.is_some() {
                    for n in &self.meta.notes {
                        eprintln!("collbench: note: {n}");
                    }
                }
                vec![csv_header(cols)]
            }
            Format::Json => Vec::new(),
        };
        self.write(|out| lines.iter().try_for_each(|l| writeln!(out, "{l}")));
    }

    /// A line announcing the next block of rows (table only), e.g. a new backend.
    pub fn section(&mut self, title: &str) {
        if self.format == Format::Table {
            self.write(|out| writeln!(out, "# {title}"));
        }
    }

    /// A fact about what the run runs on (library version, device), learnt once a backend has started:
    /// a `#` line in the table, a line on standard error with CSV (rank 0 only), an entry of
    /// `environment` in JSON.
    pub fn environment(&mut self, line: &str) {
        match self.format {
            Format::Table => self.write(|out| writeln!(out, "#  {line}")),
            Format::Csv => {
                if self.out.is_some() {
                    eprintln!("collbench: {line}");
                }
            }
            Format::Json => {}
        }
        self.meta.environment.push(line.to_string());
    }

    /// Record a row, and write it at once for table and CSV.
    pub fn row(&mut self, row: Row) {
        let text = match self.format {
            Format::Table => Some(table_row(&row, self.cols)),
            Format::Csv => Some(csv_row(&row, self.cols)),
            Format::Json => None,
        };
        if let Some(text) = text {
            self.write(|out| writeln!(out, "{text}"));
        }
        self.rows.push(row);
    }

    /// The rows recorded so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Write the footer (table) or the whole document (JSON).
    ///
    /// # Errors
    /// The first write error of the run.
    pub fn finish(&mut self) -> io::Result<()> {
        let text = match self.format {
            Format::Table => table_footer(&self.rows, self.meta.check).join("\n") + "\n",
            Format::Csv => String::new(),
            Format::Json => json_document(&self.meta, self.cols, &self.rows),
        };
        self.write(|out| out.write_all(text.as_bytes()));
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The table's closing lines: total wrong values and the average bus bandwidth (over rows and both
/// placements, as nccl-tests averages it).
pub fn table_footer(rows: &[Row], check: bool) -> Vec<String> {
    let wrong: u64 = rows
        .iter()
        .map(|r| {
            r.oop.wrong.unwrap_or(0)
                + if r.in_place {
                    r.ip.wrong.unwrap_or(0)
                } else {
                    0
                }
        })
        .sum();
    let wrong_line = if !check {
        "# wrong values total  : N/A (-c 0)".to_string()
    } else if wrong == 0 {
        "# wrong values total  : 0 OK".to_string()
    } else {
        format!("# wrong values total  : {wrong} FAILED")
    };
    let placements: usize = rows.iter().map(|r| 1 + usize::from(r.in_place)).sum();
    let avg = if rows.is_empty() {
        0.0
    } else {
        rows.iter()
            .map(|r| r.oop.busbw + if r.in_place { r.ip.busbw } else { 0.0 })
            .sum::<f64>()
            / placements as f64
    };
    vec![
        "#".to_string(),
        wrong_line,
        format!("# avg bus bandwidth   : {avg:.3} GB/s"),
        "#".to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(us: f64, wrong: Option<u64>) -> Placement {
        Placement {
            time: Spread {
                avg: us * 1e-6,
                min: (us - 1.0) * 1e-6,
                max: (us + 1.0) * 1e-6,
            },
            algbw: 0.5,
            busbw: 0.5,
            wrong,
            raw: None,
            checked_on: None,
            iter: None,
        }
    }

    fn row() -> Row {
        Row {
            backend: "mpi",
            size: 1024,
            count: 256,
            dtype: "float",
            redop: "sum",
            root: -1,
            oop: placement(10.0, Some(0)),
            ip: placement(12.5, Some(3)),
            in_place: true,
        }
    }

    #[test]
    fn csv_row_and_header_agree() {
        let cols = Columns::default();
        let h = csv_header(cols);
        let r = csv_row(&row(), cols);
        assert_eq!(h.split(',').count(), r.split(',').count());
        assert!(h.starts_with(
            "backend,size_bytes,count,type,redop,root,oop_time_us,oop_time_min_us,oop_time_max_us,"
        ));
        assert_eq!(
            r,
            "mpi,1024,256,float,sum,-1,10.000,9.000,11.000,0.5000,0.5000,0,12.500,11.500,13.500,0.5000,0.5000,3"
        );
    }

    #[test]
    fn csv_optional_columns_and_missing_values() {
        let cols = Columns {
            minmax: false,
            baseline: true,
            checked_cost: true,
            iter_stats: false,
        };
        let mut r = row();
        r.oop.raw = Some(Spread::uniform(8e-6));
        r.oop.wrong = None;
        let h = csv_header(cols);
        let line = csv_row(&r, cols);
        assert_eq!(h.split(',').count(), line.split(',').count());
        let map: Vec<(&str, &str)> = h.split(',').zip(line.split(',')).collect();
        let get = |k: &str| map.iter().find(|(n, _)| *n == k).unwrap().1;
        assert_eq!(get("oop_raw_time_us"), "8.000");
        assert_eq!(get("oop_overhead_us"), "2.000");
        assert_eq!(get("oop_ratio"), "1.2500");
        assert_eq!(get("oop_wrong"), "");
        assert_eq!(get("ip_raw_time_us"), "");
        assert_eq!(get("ip_checked_cost_us"), "");
    }

    #[test]
    fn csv_escapes() {
        assert_eq!(csv_escape("plain"), "plain");
        assert_eq!(csv_escape("a,b"), "\"a,b\"");
        assert_eq!(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn json_escapes_and_rows() {
        assert_eq!(json_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        let j = json_row(&row(), Columns::default());
        assert!(j.starts_with(
            "{\"backend\": \"mpi\", \"size_bytes\": 1024, \"count\": 256, \"type\": \"float\""
        ));
        assert!(j.contains("\"oop_time_us\": 10.000"));
        assert!(j.contains("\"ip_wrong\": 3"));
        let mut r = row();
        r.oop.wrong = None;
        r.oop.algbw = f64::INFINITY;
        let j = json_row(&r, Columns::default());
        assert!(j.contains("\"oop_wrong\": null"));
        assert!(j.contains("\"oop_algbw_gbps\": null"));
    }

    #[test]
    fn json_document_is_balanced() {
        let meta = Meta {
            benchmark: "allreduce",
            nranks: 2,
            backends: vec!["mpi"],
            checked: false,
            min_bytes: 8,
            max_bytes: 1024,
            step: "2(factor)".into(),
            warmup_iters: 5,
            iters: 20,
            check: true,
            notes: vec!["nccl: not built in yet".into()],
            environment: vec!["nccl: NCCL 2.21.5".into()],
        };
        let doc = json_document(&meta, Columns::default(), &[row(), row()]);
        assert_eq!(doc.matches('{').count(), doc.matches('}').count());
        assert_eq!(doc.matches('[').count(), doc.matches(']').count());
        assert!(doc.contains("\"notes\": [\"nccl: not built in yet\"]"));
        assert!(doc.contains("\"environment\": [\"nccl: NCCL 2.21.5\"]"));
        assert!(doc.contains("},\n    {"));
        let empty = json_document(&meta, Columns::default(), &[]);
        assert!(empty.ends_with("\"rows\": []\n}\n"));
    }

    #[test]
    fn table_lines_align() {
        for cols in [
            Columns::default(),
            Columns {
                minmax: true,
                baseline: true,
                checked_cost: true,
                iter_stats: true,
            },
        ] {
            let head = table_header(cols);
            let r = table_row(&row(), cols);
            assert_eq!(head[1].len(), r.len(), "{head:?}\n{r}");
            assert!(head.iter().all(|l| l.starts_with('#')));
            assert!(head[0].contains("out-of-place") && head[0].contains("in-place"));
        }
        let r = table_row(&row(), Columns::default());
        assert!(r.contains("float") && r.contains("10.00") && r.contains("12.50"));
    }

    #[test]
    fn times_format_like_nccl_tests() {
        assert_eq!(fmt_time_us(3.25), "3.25");
        assert_eq!(fmt_time_us(1.234), "1.23");
        assert_eq!(fmt_time_us(123.456), "123.5");
        assert_eq!(fmt_time_us(12345.6), "12346");
    }

    #[test]
    fn reporter_writes_table_and_json() {
        let meta = Meta {
            benchmark: "allreduce",
            nranks: 2,
            backends: vec!["mpi"],
            checked: true,
            min_bytes: 8,
            max_bytes: 8,
            step: "2(factor)".into(),
            warmup_iters: 1,
            iters: 1,
            check: true,
            notes: vec!["nccl: not available: no CUDA driver".into()],
            environment: Vec::new(),
        };
        let mut r = Reporter::new(
            Some(Vec::new()),
            Format::Table,
            Columns::default(),
            meta.clone(),
        );
        r.begin();
        r.row(row());
        r.section("backend nccl");
        r.environment("nccl: NCCL 2.21.5, device 0");
        r.finish().unwrap();
        let text = String::from_utf8(r.out.take().unwrap()).unwrap();
        assert!(text.starts_with("# collbench allreduce: nranks 2, backend mpi, checked on\n"));
        assert!(text.contains("#  note: nccl: not available: no CUDA driver"));
        assert!(text.contains("\n# backend nccl\n#  nccl: NCCL 2.21.5, device 0\n"));
        assert!(text.contains("3 FAILED"));
        let mut r = Reporter::new(
            Some(Vec::new()),
            Format::Json,
            Columns::default(),
            meta.clone(),
        );
        r.begin();
        r.environment("nccl: NCCL 2.21.5");
        r.row(row());
        r.finish().unwrap();
        let text = String::from_utf8(r.out.take().unwrap()).unwrap();
        assert!(text.starts_with("{\n  \"benchmark\": \"allreduce\""));
        assert!(text.contains("\"environment\": [\"nccl: NCCL 2.21.5\"]"));
        // Ranks other than 0 write nothing.
        let mut r = Reporter::<Vec<u8>>::new(None, Format::Csv, Columns::default(), meta);
        r.begin();
        r.row(row());
        assert!(r.finish().is_ok());
        assert_eq!(r.rows().len(), 1);
    }

    #[test]
    fn iteration_statistics() {
        let s = IterStats::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.min, s.p50, s.p99), (1.0, 3.0, 5.0));
        let many: Vec<f64> = (1..=200).map(f64::from).collect();
        let s = IterStats::of(&many);
        assert_eq!((s.min, s.p50, s.p99), (1.0, 100.0, 198.0));
        assert_eq!(IterStats::of(&[]).p99, 0.0);
    }

    #[test]
    fn without_an_in_place_form_the_columns_read_na_and_the_schema_stays() {
        let cols = Columns {
            iter_stats: true,
            ..Columns::default()
        };
        let mut r = row();
        r.in_place = false;
        r.oop.iter = Some(IterStats {
            min: 1e-6,
            p50: 2e-6,
            p99: 3e-6,
        });
        let h = csv_header(cols);
        let line = csv_row(&r, cols);
        assert_eq!(h.split(',').count(), line.split(',').count());
        let map: Vec<(&str, &str)> = h.split(',').zip(line.split(',')).collect();
        let get = |k: &str| map.iter().find(|(n, _)| *n == k).unwrap().1;
        assert_eq!(get("oop_iter_p99_us"), "3.000");
        assert_eq!(get("ip_time_us"), "");
        assert_eq!(get("ip_wrong"), "");
        assert_eq!(get("ip_iter_p50_us"), "");
        let t = table_row(&r, cols);
        assert!(t.trim_end().ends_with("N/A"), "{t}");
        // The footer counts the one placement only.
        let f = table_footer(&[r], true);
        assert!(f[1].contains("0 OK"), "{f:?}");
        assert!(f[2].contains("0.500"));
        let minmax = Columns {
            minmax: true,
            iter_stats: true,
            ..Columns::default()
        };
        assert_eq!(
            table_header(minmax)[1].len(),
            table_row(&row(), minmax).len()
        );
    }

    #[test]
    fn footer_counts_wrong() {
        let f = table_footer(&[row()], true);
        assert!(f[1].contains("3 FAILED"));
        assert!(f[2].contains("0.500"));
        let f = table_footer(&[], false);
        assert!(f[1].contains("N/A"));
    }
}
