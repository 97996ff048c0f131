//! Message sizes: parsing `8`, `1K`, `64M`, `1G` and the sequence of sizes a run visits.
//!
//! As in nccl-tests, the suffixes `K`, `M` and `G` (either case) are powers of 1024, and the sequence
//! starts at `-b`, then multiplies by `-f` or adds `-i` while the size stays at most `-e`.

/// The largest number of sizes one run visits; beyond this the step is almost certainly a mistake.
pub const MAX_STEPS: usize = 10_000;

/// Parse a size in bytes: digits with an optional `K`, `M` or `G` suffix (powers of 1024).
///
/// # Errors
/// A message naming the text when it is empty, not a number, has an unknown suffix or overflows.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        None => return Err("empty size (expected e.g. 8, 1K, 64M, 1G)".to_string()),
        Some((i, c)) => match c.to_ascii_uppercase() {
            'K' => (&t[..i], 10),
            'M' => (&t[..i], 20),
            'G' => (&t[..i], 30),
            _ => (t, 0),
        },
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid size `{text}` (expected digits with an optional K, M or G suffix, e.g. 8, 1K, 64M, 1G)"));
    }
    let n: usize = digits
        .parse()
        .map_err(|_| format!("size `{text}` is too large"))?;
    n.checked_mul(1usize << shift)
        .ok_or_else(|| format!("size `{text}` is too large"))
}

/// The size flags of every benchmark (nccl-tests' `-b -e -f -i`), declared once and flattened into
/// each subcommand's flags with `#[command(flatten)]`. A subcommand whose sizes start or end elsewhere
/// changes the default with `#[command(mut_arg("min_bytes", |a| a.default_value("1K")))]`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct SizeArgs {
    /// Smallest size in bytes (suffixes K, M, G are powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Multiply the size by this factor from one row to the next.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: usize,
    /// Add this many bytes from one row to the next (instead of -f).
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size, conflicts_with = "step_factor")]
    pub step_bytes: Option<usize>,
}

impl SizeArgs {
    /// The step: `-i` where given, `-f` otherwise.
    pub fn step(&self) -> Step {
        self.step_bytes
            .map_or(Step::Factor(self.step_factor), Step::Bytes)
    }

    /// The sizes these flags visit.
    ///
    /// # Errors
    /// As [`sequence`].
    pub fn sequence(&self) -> Result<Vec<usize>, String> {
        sequence(self.min_bytes, self.max_bytes, self.step())
    }
}

/// The loop flags of the benchmarks that time a fixed number of calls per size (nccl-tests' `-n -w`),
/// declared once and flattened like [`SizeArgs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct LoopArgs {
    /// Timed calls per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Warm-up calls per size, before the timed ones.
    #[arg(
        short = 'w',
        long = "warmup_iters",
        visible_alias = "warmup-iters",
        default_value_t = 5
    )]
    pub warmup_iters: u32,
}

/// How the sequence of sizes grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Multiply by this factor (`-f`, at least 2).
    Factor(usize),
    /// Add this many bytes (`-i`, at least 1).
    Bytes(usize),
}

impl Step {
    /// Description for the output header (`2(factor)`, `1048576(bytes)`), as nccl-tests prints it.
    pub fn describe(self) -> String {
        match self {
            Step::Factor(f) => format!("{f}(factor)"),
            Step::Bytes(b) => format!("{b}(bytes)"),
        }
    }
}

/// The sizes from `min` to at most `max` (both in bytes), growing by `step`.
///
/// # Errors
/// `min > max`; a factor below 2; a step of 0 bytes; a start of 0 bytes with a factor (it would never
/// grow); more than [`MAX_STEPS`] sizes.
pub fn sequence(min: usize, max: usize, step: Step) -> Result<Vec<usize>, String> {
    if min > max {
        return Err(format!("minbytes ({min}) is larger than maxbytes ({max})"));
    }
    match step {
        Step::Factor(f) if f < 2 => return Err(format!("stepfactor must be at least 2 (got {f})")),
        Step::Factor(_) if min == 0 => {
            return Err(
                "minbytes 0 never grows by a factor; start at 1 or more, or step with -i"
                    .to_string(),
            )
        }
        Step::Bytes(0) => return Err("stepbytes must be at least 1".to_string()),
        _ => {}
    }
    let mut sizes = Vec::new();
    let mut size = min;
    loop {
        if sizes.len() == MAX_STEPS {
            return Err(format!(
                "the sizes from {min} to {max} by {} are more than {MAX_STEPS}; take a larger step",
                step.describe()
            ));
        }
        sizes.push(size);
        let next = match step {
            Step::Factor(f) => size.checked_mul(f),
            Step::Bytes(b) => size.checked_add(b),
        };
        match next {
            Some(n) if n <= max => size = n,
            _ => break,
        }
    }
    Ok(sizes)
}

/// The element counts for `sizes` with elements of `elem_size` bytes: each size rounded down to whole
/// elements, dropping sizes smaller than one element and repeats of the previous count.
pub fn counts(sizes: &[usize], elem_size: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(sizes.len());
    for &s in sizes {
        let c = s / elem_size;
        if (c == 0 && s > 0) || out.last() == Some(&c) {
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_sizes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("3g"), Ok(3 << 30));
        assert_eq!(parse_size(" 16 "), Ok(16));
    }

    #[test]
    fn rejects_invalid_sizes() {
        for bad in [
            "", "K", "-8", "1.5M", "8B", "1T", "abc", "1 K", "+8", "0x10",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999999999G").is_err());
    }

    #[test]
    fn factor_sequence_is_inclusive_of_max() {
        assert_eq!(sequence(8, 64, Step::Factor(2)), Ok(vec![8, 16, 32, 64]));
        assert_eq!(sequence(8, 100, Step::Factor(2)), Ok(vec![8, 16, 32, 64]));
        assert_eq!(
            sequence(1, 1000, Step::Factor(10)),
            Ok(vec![1, 10, 100, 1000])
        );
        assert_eq!(sequence(5, 5, Step::Factor(2)), Ok(vec![5]));
        let s = sequence(8, 64 << 20, Step::Factor(2)).unwrap();
        assert_eq!(s.len(), 24);
        assert_eq!(*s.last().unwrap(), 64 << 20);
    }

    #[test]
    fn bytes_sequence() {
        assert_eq!(sequence(0, 3, Step::Bytes(1)), Ok(vec![0, 1, 2, 3]));
        assert_eq!(
            sequence(1024, 4096, Step::Bytes(1024)),
            Ok(vec![1024, 2048, 3072, 4096])
        );
        assert_eq!(sequence(1, 10, Step::Bytes(4)), Ok(vec![1, 5, 9]));
    }

    #[test]
    fn sequence_rejects_bad_arguments() {
        assert!(sequence(64, 8, Step::Factor(2)).is_err());
        assert!(sequence(8, 64, Step::Factor(1)).is_err());
        assert!(sequence(8, 64, Step::Factor(0)).is_err());
        assert!(sequence(0, 64, Step::Factor(2)).is_err());
        assert!(sequence(8, 64, Step::Bytes(0)).is_err());
        assert!(sequence(1, 1 << 30, Step::Bytes(1)).is_err());
        // No overflow near the top of the range.
        assert_eq!(
            sequence(usize::MAX / 2 + 1, usize::MAX, Step::Factor(2)),
            Ok(vec![usize::MAX / 2 + 1])
        );
        assert_eq!(
            sequence(usize::MAX - 1, usize::MAX, Step::Bytes(5)),
            Ok(vec![usize::MAX - 1])
        );
    }

    #[test]
    fn counts_round_down_and_skip_partial_and_repeated() {
        assert_eq!(counts(&[8, 16, 32], 4), vec![2, 4, 8]);
        assert_eq!(counts(&[8, 16, 32], 16), vec![1, 2]);
        assert_eq!(counts(&[0, 1, 2, 3, 4, 5], 4), vec![0, 1]);
        assert_eq!(counts(&[10], 4), vec![2]);
    }
}
