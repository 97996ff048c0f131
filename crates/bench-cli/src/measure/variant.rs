//! The variants of a measured call: the library's call, the backend's own call on the same handle and
//! buffers (`--baseline raw`), the library's call with checked mode on (`--checked-cost`), and the
//! library's persistent plan (`--persistent`); and the closing comparison of a run that timed
//! several.
//!
//! Each variant is a backend of the engine of its own ([`crate::measure::hooks::BenchBackend::variant`]) and
//! gives rows of its own; at each size the variants run one after the other, so that they see the
//! same state of the machine.

use crate::output::record::Row;

/// Which call is timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The library's call.
    #[default]
    Library,
    /// The backend's own call (`MPI_Allreduce`, `ncclAllReduce`) on the same handle and buffers.
    Raw,
    /// The library's call on a communicator with checked mode on.
    Checked,
    /// The library's call on NCCL buffers from `ncclMemAlloc` registered with `ncclCommRegister`
    /// (`--register buffer`).
    Registered,
    /// The library's call on NCCL buffers from `ncclMemAlloc` registered on every rank as
    /// symmetric windows (`--register window`).
    Window,
    /// The library's persistent plan (`*_init` once per size, then `start` and `wait` per call:
    /// [`crate::measure::persistent`]).
    Persistent,
}

impl Variant {
    /// Its name in the `variant` column and field.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Library => "library",
            Variant::Raw => "raw",
            Variant::Checked => "checked",
            Variant::Registered => "registered",
            Variant::Window => "window",
            Variant::Persistent => "persistent",
        }
    }

    /// How the variant's NCCL buffers are registered.
    pub const fn register_mode(self) -> collectives_core::RegisterMode {
        match self {
            Variant::Registered => collectives_core::RegisterMode::Buffer,
            Variant::Window => collectives_core::RegisterMode::Window,
            _ => collectives_core::RegisterMode::None,
        }
    }

    /// The variant that times buffers registered as `mode` (`None`: the library's).
    pub const fn of_register_mode(mode: collectives_core::RegisterMode) -> Variant {
        match mode {
            collectives_core::RegisterMode::Buffer => Variant::Registered,
            collectives_core::RegisterMode::Window => Variant::Window,
            _ => Variant::Library,
        }
    }
}

/// The comparison lines (no `#`) of rows of several variants: per backend, type, operation and size,
/// what the library adds to the raw call (`library - raw`, and `library / raw`), what checked mode
/// costs (`checked - library`) and what a persistent plan saves or costs (`persistent - library`),
/// in microseconds per call, out-of-place and in-place. Empty when only the library was timed.
pub fn comparison_lines(rows: &[Row]) -> Vec<String> {
    let library = Variant::Library.name();
    let has = |v: Variant| rows.iter().any(|r| r.variant == v.name());
    let mut registration = registration_lines(rows);
    if !has(Variant::Raw) && !has(Variant::Checked) && !has(Variant::Persistent) {
        return registration;
    }
    let mut lines = vec![
        "variants: overhead = library - raw, ratio = library / raw, cost = checked - library, \
         plan = persistent - library (us per call; oop | ip)"
            .to_string(),
        format!(
            "{:>12} {:>10} {:>10} {:>6} {:>19} {:>13} {:>19} {:>19}",
            "size(B)", "backend", "type", "redop", "overhead", "ratio", "cost", "plan"
        ),
    ];
    for r in rows.iter().filter(|r| r.variant == library) {
        let other = |v: Variant| {
            rows.iter().find(|o| {
                o.variant == v.name()
                    && (o.backend, o.dtype, o.redop, o.size)
                        == (r.backend, r.dtype, r.redop, r.size)
            })
        };
        let pair = |f: &dyn Fn(bool) -> Option<String>| {
            let ip = if r.in_place { f(true) } else { None };
            format!(
                "{} | {}",
                f(false).unwrap_or_else(|| "-".into()),
                ip.unwrap_or_else(|| "-".into())
            )
        };
        let time = |row: &Row, ip: bool| {
            if ip {
                row.ip.time.avg
            } else {
                row.oop.time.avg
            }
        };
        let raw = other(Variant::Raw);
        let checked = other(Variant::Checked);
        let overhead = pair(&|ip| raw.map(|o| format!("{:.2}", (time(r, ip) - time(o, ip)) * 1e6)));
        let ratio = pair(&|ip| {
            raw.filter(|o| time(o, ip) > 0.0)
                .map(|o| format!("{:.2}", time(r, ip) / time(o, ip)))
        });
        let cost = pair(&|ip| checked.map(|c| format!("{:.2}", (time(c, ip) - time(r, ip)) * 1e6)));
        let persistent = other(Variant::Persistent);
        let plan =
            pair(&|ip| persistent.map(|p| format!("{:.2}", (time(p, ip) - time(r, ip)) * 1e6)));
        lines.push(format!(
            "{:>12} {:>10} {:>10} {:>6} {overhead:>19} {ratio:>13} {cost:>19} {plan:>19}",
            r.size, r.backend, r.dtype, r.redop
        ));
    }
    lines.append(&mut registration);
    lines
}

/// The registration comparison (no `#`): per size, the time per call of the library's rows
/// (cudarc's buffers) beside the `registered` and `window` rows, in microseconds, out-of-place and
/// in-place. Empty when neither registered variant ran.
fn registration_lines(rows: &[Row]) -> Vec<String> {
    let named = |v: Variant| rows.iter().any(|r| r.variant == v.name());
    if !named(Variant::Registered) && !named(Variant::Window) {
        return Vec::new();
    }
    let mut lines = vec![
        "registration: time per call (us; oop | ip) on unregistered, registered and window buffers"
            .to_string(),
        format!(
            "{:>12} {:>10} {:>10} {:>6} {:>19} {:>19} {:>19}",
            "size(B)", "backend", "type", "redop", "none", "registered", "window"
        ),
    ];
    let mut keys: Vec<(&str, &str, &str, usize)> = Vec::new();
    for r in rows {
        let k = (r.backend, r.dtype, r.redop, r.size);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (backend, dtype, redop, size) in keys {
        let cell = |v: Variant| {
            rows.iter()
                .find(|o| {
                    o.variant == v.name()
                        && (o.backend, o.dtype, o.redop, o.size) == (backend, dtype, redop, size)
                })
                .map_or_else(
                    || "-".to_string(),
                    |o| {
                        let ip = if o.in_place {
                            format!("{:.2}", o.ip.time.avg * 1e6)
                        } else {
                            "-".to_string()
                        };
                        format!("{:.2} | {ip}", o.oop.time.avg * 1e6)
                    },
                )
        };
        lines.push(format!(
            "{size:>12} {backend:>10} {dtype:>10} {redop:>6} {:>19} {:>19} {:>19}",
            cell(Variant::Library),
            cell(Variant::Registered),
            cell(Variant::Window)
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::record::tests::row_us;

    fn row(variant: Variant, size: usize, us: f64) -> Row {
        Row {
            variant: variant.name(),
            ..row_us(size, us)
        }
    }

    #[test]
    fn compares_the_variants_of_each_size() {
        let rows = [
            row(Variant::Library, 8, 0.34),
            row(Variant::Raw, 8, 0.27),
            row(Variant::Checked, 8, 1.04),
            row(Variant::Library, 16, 0.5),
            row(Variant::Persistent, 16, 0.25),
        ];
        let lines = comparison_lines(&rows);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[3].contains("-0.25 | -0.25"), "{}", lines[3]);
        assert!(!comparison_lines(&rows[3..]).is_empty());
        assert_eq!(Variant::Persistent.name(), "persistent");
        assert!(lines[2].contains("0.07 | 0.07"), "{}", lines[2]);
        assert!(lines[2].contains("1.26 | 1.26"), "{}", lines[2]);
        assert!(lines[2].contains("0.70 | 0.70"), "{}", lines[2]);
        assert!(lines[3].starts_with("          16"), "{}", lines[3]);
        assert!(lines[2].ends_with("- | -"), "{}", lines[2]);
        assert!(comparison_lines(&rows[..1]).is_empty());
        assert_eq!(Variant::default().name(), "library");
    }

    #[test]
    fn compares_registration_modes_size_by_size() {
        let rows = [
            row(Variant::Library, 8, 20.0),
            row(Variant::Registered, 8, 19.0),
            row(Variant::Window, 8, 6.5),
            row(Variant::Library, 16, 21.0),
        ];
        let lines = comparison_lines(&rows);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[2].contains("20.00 | 20.00"), "{}", lines[2]);
        assert!(lines[2].contains("19.00 | 19.00"), "{}", lines[2]);
        assert!(lines[2].contains("6.50 | 6.50"), "{}", lines[2]);
        assert!(lines[3].ends_with('-'), "{}", lines[3]);
        for mode in collectives_core::RegisterMode::ALL {
            assert_eq!(Variant::of_register_mode(mode).register_mode(), mode);
        }
    }
}
