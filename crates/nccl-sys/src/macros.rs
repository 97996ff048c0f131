//! `nccl.h`'s macros that bindgen cannot turn into Rust (initializers, function-like macros,
//! pointers) or that deserve a precise Rust type, re-created by hand. The generator leaves the
//! plain ones (`NCCL_SPLIT_NOCOLOR`, ...) out of the generated constants so that only these exist.
//!
//! Each follows the pinned header (`HEADER.md`); a header whose `NCCL_CONFIG_INITIALIZER` stops
//! being "size, magic, version, then undefined" makes `cargo xtask nccl-bindings` stop, and a new
//! field in a config struct stops this module from compiling until its initializer is updated.

use std::os::raw::{c_char, c_int, c_uint};
use std::ptr;

use crate::bindings::{
    ncclCollConfig_t, ncclComm_t, ncclConfig_t, ncclSimInfo_t, NCCL_VERSION_CODE,
};

/// `NCCL_UNIQUE_ID_BYTES`: the size of [`ncclUniqueId`](crate::ncclUniqueId)'s opaque bytes.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `NCCL_SPLIT_NOCOLOR`: the color passed to `ncclCommSplit` by a rank that joins no new
/// communicator (it gets a null one back).
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;

/// `NCCL_CONFIG_UNDEF_INT` (`INT_MIN`): an integer config field left for NCCL to choose.
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;

/// `NCCL_CONFIG_UNDEF_PTR` (`NULL`): a pointer config field left for NCCL to choose.
pub const NCCL_CONFIG_UNDEF_PTR: *const c_char = ptr::null();

/// `NCCL_UNDEF_FLOAT` (`-1.0f`): a float field not filled in.
pub const NCCL_UNDEF_FLOAT: f32 = -1.0;

/// `NCCL_API_MAGIC` (`0xcafebeef`): the `magic` of initialized config structs.
pub const NCCL_API_MAGIC: c_uint = 0xcafe_beef;

/// The `magic` that `NCCL_SIM_INFO_INITIALIZER` writes into [`ncclSimInfo_t`].
pub const NCCL_SIM_INFO_MAGIC: c_uint = 0x7468_5283;

/// `NCCL_COMM_NULL`: the null communicator.
pub const NCCL_COMM_NULL: ncclComm_t = ptr::null_mut();

/// `NCCL_VERSION(X,Y,Z)`: the version code of release `X.Y.Z`, in the header's two schemes:
/// `X*1000 + Y*100 + Z` when `X <= 2 && Y <= 8`, else `X*10000 + Y*100 + Z`.
pub const fn nccl_version(x: c_int, y: c_int, z: c_int) -> c_int {
    if x <= 2 && y <= 8 {
        x * 1000 + y * 100 + z
    } else {
        x * 10000 + y * 100 + z
    }
}

/// `NCCL_CONFIG_INITIALIZER`: a config whose `size`, `magic` and `version` identify the pinned
/// header's [`ncclConfig_t`] and whose other fields are undefined, so NCCL picks each.
///
/// A newer library reads an older config (it checks `version`), and an older library reads only
/// the leading fields it knows (it copies `min(size, its own size)` bytes), so this value works
/// with every supported release; fields an older release does not know are ignored by it.
pub const fn config_initializer() -> ncclConfig_t {
    const UNDEF: c_int = NCCL_CONFIG_UNDEF_INT;
    ncclConfig_t {
        size: std::mem::size_of::<ncclConfig_t>(),
        magic: NCCL_API_MAGIC,
        version: NCCL_VERSION_CODE,
        blocking: UNDEF,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: NCCL_CONFIG_UNDEF_PTR,
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: NCCL_CONFIG_UNDEF_PTR,
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
        graphUsageMode: UNDEF,
        numRmaCtx: UNDEF,
        maxP2pPeers: UNDEF,
        graphStreamOrdering: UNDEF,
        launchOrderImplicit: UNDEF,
        numRmaSig: UNDEF,
        rmaEagerInit: UNDEF,
        hostCftMode: UNDEF,
        nvlsHostMode: UNDEF,
    }
}

/// `NCCL_COLLCONFIG_INITIALIZER`: the per-collective config of the `nccl*Config` entry points
/// (NCCL 2.31 and later): undefined tuning, `forceAlgSelection = 1`, no profiler tag, no
/// completion event.
pub const fn coll_config_initializer() -> ncclCollConfig_t {
    ncclCollConfig_t {
        size: std::mem::size_of::<ncclCollConfig_t>(),
        magic: NCCL_API_MAGIC,
        version: NCCL_VERSION_CODE,
        ext: ptr::null_mut(),
        minCTAs: NCCL_CONFIG_UNDEF_INT,
        maxCTAs: NCCL_CONFIG_UNDEF_INT,
        nvlsCTAs: NCCL_CONFIG_UNDEF_INT,
        cgaClusterSize: NCCL_CONFIG_UNDEF_INT,
        algSelection: NCCL_CONFIG_UNDEF_PTR,
        forceAlgSelection: 1,
        CTAPolicy: NCCL_CONFIG_UNDEF_INT,
        userProfilerTag: 0,
        launchCompletionEvent: ptr::null_mut(),
    }
}

/// `NCCL_SIM_INFO_INITIALIZER`: the argument of `ncclGroupSimulateEnd` (NCCL 2.22 and later).
pub const fn sim_info_initializer() -> ncclSimInfo_t {
    ncclSimInfo_t {
        size: std::mem::size_of::<ncclSimInfo_t>(),
        magic: NCCL_SIM_INFO_MAGIC,
        version: NCCL_VERSION_CODE,
        estimatedTime: NCCL_UNDEF_FLOAT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::{ncclUniqueId, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH};

    #[test]
    fn unique_id_bytes_is_the_size_of_nccluniqueid() {
        assert_eq!(NCCL_UNIQUE_ID_BYTES, 128);
        assert_eq!(std::mem::size_of::<ncclUniqueId>(), NCCL_UNIQUE_ID_BYTES);
        let id = ncclUniqueId {
            internal: [0; NCCL_UNIQUE_ID_BYTES],
        };
        assert_eq!(id.internal.len(), NCCL_UNIQUE_ID_BYTES);
    }

    #[test]
    fn split_nocolor_is_minus_one() {
        assert_eq!(NCCL_SPLIT_NOCOLOR, -1);
    }

    #[test]
    fn undefined_markers() {
        assert_eq!(NCCL_CONFIG_UNDEF_INT, i32::MIN);
        assert!(NCCL_CONFIG_UNDEF_PTR.is_null());
        assert!(NCCL_COMM_NULL.is_null());
        assert_eq!(NCCL_UNDEF_FLOAT, -1.0);
        assert_eq!(NCCL_API_MAGIC, 0xcafebeef);
    }

    #[test]
    fn nccl_version_uses_both_schemes() {
        assert_eq!(nccl_version(2, 8, 4), 2804);
        assert_eq!(nccl_version(2, 0, 5), 2005);
        assert_eq!(nccl_version(2, 9, 0), 20900);
        assert_eq!(nccl_version(2, 18, 1), 21801);
        assert_eq!(nccl_version(2, 28, 3), 22803);
        assert_eq!(nccl_version(3, 0, 0), 30000);
        // The header's own code agrees with the macro.
        assert_eq!(
            nccl_version(
                NCCL_MAJOR as c_int,
                NCCL_MINOR as c_int,
                NCCL_PATCH as c_int
            ),
            NCCL_VERSION_CODE as c_int
        );
    }

    #[test]
    fn config_initializer_matches_the_header_macro() {
        let c = config_initializer();
        assert_eq!(c.size, std::mem::size_of::<ncclConfig_t>());
        assert_eq!(c.magic, 0xcafebeef);
        assert_eq!(c.version, NCCL_VERSION_CODE);
        for (name, value) in [
            ("blocking", c.blocking),
            ("cgaClusterSize", c.cgaClusterSize),
            ("minCTAs", c.minCTAs),
            ("maxCTAs", c.maxCTAs),
            ("splitShare", c.splitShare),
            ("trafficClass", c.trafficClass),
            ("collnetEnable", c.collnetEnable),
            ("CTAPolicy", c.CTAPolicy),
            ("shrinkShare", c.shrinkShare),
            ("nvlsCTAs", c.nvlsCTAs),
            ("nChannelsPerNetPeer", c.nChannelsPerNetPeer),
            ("nvlinkCentricSched", c.nvlinkCentricSched),
            ("graphUsageMode", c.graphUsageMode),
            ("numRmaCtx", c.numRmaCtx),
            ("maxP2pPeers", c.maxP2pPeers),
            ("graphStreamOrdering", c.graphStreamOrdering),
            ("launchOrderImplicit", c.launchOrderImplicit),
            ("numRmaSig", c.numRmaSig),
            ("rmaEagerInit", c.rmaEagerInit),
            ("hostCftMode", c.hostCftMode),
            ("nvlsHostMode", c.nvlsHostMode),
        ] {
            assert_eq!(value, NCCL_CONFIG_UNDEF_INT, "{name}");
        }
        assert!(c.netName.is_null());
        assert!(c.commName.is_null());
    }

    #[test]
    fn initializers_work_in_const_context() {
        const CONFIG: ncclConfig_t = config_initializer();
        const COLL: ncclCollConfig_t = coll_config_initializer();
        const SIM: ncclSimInfo_t = sim_info_initializer();
        let header = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
        assert_eq!(CONFIG.version, header);
        assert_eq!(COLL.version, header);
        assert_eq!(SIM.version, header);
    }

    #[test]
    fn the_pinned_config_keeps_the_2_18_prefix() {
        // NCCL 2.18's ncclConfig_t ends after splitShare; a 2.18 library copies only that prefix.
        use std::mem::offset_of;
        assert_eq!(offset_of!(ncclConfig_t, size), 0);
        assert_eq!(offset_of!(ncclConfig_t, magic), 8);
        assert_eq!(offset_of!(ncclConfig_t, version), 12);
        assert_eq!(offset_of!(ncclConfig_t, blocking), 16);
        assert_eq!(offset_of!(ncclConfig_t, cgaClusterSize), 20);
        assert_eq!(offset_of!(ncclConfig_t, minCTAs), 24);
        assert_eq!(offset_of!(ncclConfig_t, maxCTAs), 28);
        assert_eq!(offset_of!(ncclConfig_t, netName), 32);
        assert_eq!(offset_of!(ncclConfig_t, splitShare), 40);
    }

    #[test]
    fn coll_config_initializer_matches_the_header_macro() {
        let c = coll_config_initializer();
        assert_eq!(c.size, std::mem::size_of::<ncclCollConfig_t>());
        assert_eq!(c.magic, NCCL_API_MAGIC);
        assert_eq!(c.version, NCCL_VERSION_CODE);
        assert!(c.ext.is_null());
        assert_eq!(c.minCTAs, NCCL_CONFIG_UNDEF_INT);
        assert_eq!(c.maxCTAs, NCCL_CONFIG_UNDEF_INT);
        assert_eq!(c.nvlsCTAs, NCCL_CONFIG_UNDEF_INT);
        assert_eq!(c.cgaClusterSize, NCCL_CONFIG_UNDEF_INT);
        assert!(c.algSelection.is_null());
        assert_eq!(c.forceAlgSelection, 1);
        assert_eq!(c.CTAPolicy, NCCL_CONFIG_UNDEF_INT);
        assert_eq!(c.userProfilerTag, 0);
        assert!(c.launchCompletionEvent.is_null());
    }

    #[test]
    fn sim_info_initializer_matches_the_header_macro() {
        let s = sim_info_initializer();
        assert_eq!(s.size, std::mem::size_of::<ncclSimInfo_t>());
        assert_eq!(s.magic, 0x74685283);
        assert_eq!(s.version, NCCL_VERSION_CODE);
        assert_eq!(s.estimatedTime, -1.0);
    }
}
