//! The closing summary of a run over several backends: per type, operation and size, each backend's
//! time and the fastest one.

use crate::output::record::{fmt_time_us, Row};

/// The summary's lines (no `#`): a header, then one line per (type, operation, size) with each
/// backend's out-of-place time in microseconds, the fastest backend out of place and in place, and how
/// much faster the fastest is than the next one out of place. Empty when fewer than two backends ran.
pub fn fastest_lines(rows: &[Row]) -> Vec<String> {
    let mut backends: Vec<&'static str> = Vec::new();
    let mut keys: Vec<(&'static str, &'static str, usize)> = Vec::new();
    // The library's own calls; other variants are compared in [`crate::measure::variant`].
    let rows: Vec<&Row> = rows.iter().filter(|r| r.variant == "library").collect();
    let rows = &rows[..];
    for r in rows {
        if !backends.contains(&r.backend) {
            backends.push(r.backend);
        }
        let key = (r.dtype, r.redop, r.size);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    if backends.len() < 2 {
        return Vec::new();
    }
    // Types and operations in the order they ran, sizes ascending within each.
    let order: Vec<(&str, &str)> = keys.iter().fold(Vec::new(), |mut v, (d, o, _)| {
        if !v.contains(&(*d, *o)) {
            v.push((*d, *o));
        }
        v
    });
    keys.sort_by_key(|(d, o, s)| (order.iter().position(|k| *k == (*d, *o)), *s));
    let mut head = format!("{:>12} {:>10} {:>6}", "size(B)", "type", "redop");
    for b in &backends {
        head.push_str(&format!(" {b:>11}"));
    }
    head.push_str("   fastest(oop)  fastest(ip)  lead(oop)");
    let mut lines = vec![
        "fastest backend per size: out-of-place time per call (us) of each backend".to_string(),
        head,
    ];
    for (dtype, redop, size) in keys {
        let of = |b: &str| {
            rows.iter()
                .find(|r| r.backend == b && r.dtype == dtype && r.redop == redop && r.size == size)
        };
        let mut line = format!("{size:>12} {dtype:>10} {redop:>6}");
        for b in &backends {
            let cell = of(b).map_or_else(|| "-".to_string(), |r| fmt_time_us(r.oop.time.avg * 1e6));
            line.push_str(&format!(" {cell:>11}"));
        }
        let ranked = |ip: bool| {
            let mut v: Vec<(&str, f64)> = backends
                .iter()
                .filter_map(|b| {
                    of(b).map(|r| (*b, if ip { r.ip.time.avg } else { r.oop.time.avg }))
                })
                .filter(|(_, t)| t.is_finite() && *t > 0.0)
                .collect();
            v.sort_by(|a, b| a.1.total_cmp(&b.1));
            v
        };
        let oop = ranked(false);
        let ip = ranked(true);
        let lead = match (oop.first(), oop.get(1)) {
            (Some(a), Some(b)) => format!("{:.2}x", b.1 / a.1),
            _ => "-".to_string(),
        };
        line.push_str(&format!(
            "   {:<13} {:<12} {lead}",
            oop.first().map_or("-", |x| x.0),
            ip.first().map_or("-", |x| x.0),
        ));
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::record::tests::{placement_us, row_us};

    fn row(backend: &'static str, size: usize, oop_us: f64, ip_us: f64) -> Row {
        Row {
            backend,
            ip: placement_us(ip_us),
            ..row_us(size, oop_us)
        }
    }

    #[test]
    fn picks_the_fastest_per_size() {
        let rows = [
            row("mpi", 8, 1.0, 1.0),
            row("mpi", 1024, 10.0, 9.0),
            row("nccl", 8, 20.0, 0.5),
            row("nccl", 1024, 5.0, 12.0),
        ];
        let lines = fastest_lines(&rows);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[1].contains("mpi") && lines[1].contains("nccl"));
        assert!(lines[2].trim_start().starts_with("8 "));
        assert!(lines[2].contains("mpi           nccl"), "{}", lines[2]);
        assert!(lines[2].ends_with("20.00x"), "{}", lines[2]);
        assert!(lines[3].contains("nccl          mpi"), "{}", lines[3]);
        assert!(lines[3].ends_with("2.00x"), "{}", lines[3]);
    }

    #[test]
    fn one_backend_has_no_summary() {
        assert!(fastest_lines(&[row("mpi", 8, 1.0, 1.0)]).is_empty());
        assert!(fastest_lines(&[]).is_empty());
    }

    #[test]
    fn a_missing_row_is_a_dash() {
        let rows = [row("mpi", 8, 1.0, 1.0), row("nccl", 16, 1.0, 1.0)];
        let lines = fastest_lines(&rows);
        assert_eq!(lines.len(), 4);
        assert!(lines[2].contains(" - "), "{}", lines[2]);
        assert!(lines[2].ends_with(" -"), "{}", lines[2]);
    }
}
