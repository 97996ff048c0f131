//! [`Version`]: an NCCL release number, as `ncclGetVersion` reports it and as the loader and its
//! errors name it.

use std::fmt;
use std::os::raw::c_int;

use crate::macros::nccl_version;

/// An NCCL release number.
///
/// `ncclGetVersion` reports it as one integer, in the scheme of the header's `NCCL_VERSION(X,Y,Z)`
/// macro ([`nccl_version`]): `X*10000 + Y*100 + Z` since NCCL 2.9 (2.28.3 is 22803), and
/// `X*1000 + Y*100 + Z` for 2.8 and older (2.8.4 is 2804). Codes below 10000 are decoded with the
/// old scheme, the others with the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// `NCCL_MAJOR`.
    pub major: u32,
    /// `NCCL_MINOR`.
    pub minor: u32,
    /// `NCCL_PATCH`.
    pub patch: u32,
}

impl Version {
    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Decodes a version code as `ncclGetVersion` returns it; `None` for a negative code.
    pub const fn from_code(code: c_int) -> Option<Self> {
        if code < 0 {
            return None;
        }
        let code = code as u32;
        Some(if code < 10_000 {
            Version::new(code / 1000, code % 1000 / 100, code % 100)
        } else {
            Version::new(code / 10_000, code % 10_000 / 100, code % 100)
        })
    }

    /// The version code, as the header's `NCCL_VERSION(major, minor, patch)` computes it.
    pub const fn code(self) -> c_int {
        nccl_version(
            self.major as c_int,
            self.minor as c_int,
            self.patch as c_int,
        )
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_new_scheme_codes() {
        assert_eq!(Version::from_code(22803), Some(Version::new(2, 28, 3)));
        assert_eq!(Version::from_code(21801), Some(Version::new(2, 18, 1)));
        assert_eq!(Version::from_code(20900), Some(Version::new(2, 9, 0)));
        assert_eq!(Version::from_code(23203), Some(Version::new(2, 32, 3)));
        assert_eq!(Version::from_code(30000), Some(Version::new(3, 0, 0)));
    }

    #[test]
    fn decodes_old_scheme_codes() {
        assert_eq!(Version::from_code(2804), Some(Version::new(2, 8, 4)));
        assert_eq!(Version::from_code(2408), Some(Version::new(2, 4, 8)));
        assert_eq!(Version::from_code(2000), Some(Version::new(2, 0, 0)));
    }

    #[test]
    fn rejects_negative_codes() {
        assert_eq!(Version::from_code(-1), None);
        assert_eq!(Version::from_code(c_int::MIN), None);
    }

    #[test]
    fn code_round_trips_through_both_schemes() {
        for v in [
            Version::new(2, 8, 4),
            Version::new(2, 9, 6),
            Version::new(2, 18, 1),
            Version::new(2, 28, 3),
            Version::new(2, 32, 3),
        ] {
            assert_eq!(Version::from_code(v.code()), Some(v), "{v}");
        }
        assert_eq!(Version::new(2, 8, 4).code(), 2804);
        assert_eq!(Version::new(2, 28, 3).code(), 22803);
    }

    #[test]
    fn versions_order_numerically_and_display_dotted() {
        assert!(Version::new(2, 9, 0) > Version::new(2, 8, 9));
        assert!(Version::new(2, 28, 3) > Version::new(2, 18, 10));
        assert!(Version::new(3, 0, 0) > Version::new(2, 99, 99));
        assert_eq!(Version::new(2, 28, 3).to_string(), "2.28.3");
    }
}
