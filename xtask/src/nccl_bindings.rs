//! `cargo xtask nccl-bindings --header PATH [--check]`: regenerates the checked-in NCCL
//! bindings of `crates/nccl-sys` from a pinned `nccl.h` (see `crates/nccl-sys/HEADER.md`).
//!
//! Two files come out, both formatted with `rustfmt`:
//!
//! | file                             | what is in it                                                  |
//! |----------------------------------|----------------------------------------------------------------|
//! | `crates/nccl-sys/src/bindings.rs`  | types, enums (as integer aliases and consts) and `#define`d constants, with layout assertions; the header's version and SHA-256 |
//! | `crates/nccl-sys/src/functions.rs` | `Nccl`: a `libloading` table with one `Result<fn, _>` per entry point, resolved at run time |
//!
//! No `extern "C"` block is generated: nothing links against libnccl.
//!
//! The header includes `cuda_runtime.h` and friends; they are replaced by stubs written to a
//! temporary directory (`cudaStream_t` and `cudaEvent_t` as pointers to opaque structs), so no
//! CUDA installation is needed. libclang is loaded at run time (`LIBCLANG_PATH`, else the usual
//! places).
//!
//! `--check` regenerates into memory and fails when either checked-in file differs.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::workspace_root;

/// Usage of this subcommand.
const USAGE: &str = "usage: cargo xtask nccl-bindings --header PATH/TO/nccl.h [--check]";

/// Directory of the crate whose bindings are generated, relative to the workspace root.
const CRATE_DIR: &str = "crates/nccl-sys";

/// The generated types and constants, relative to [`CRATE_DIR`].
const TYPES_FILE: &str = "src/bindings.rs";

/// The generated function table, relative to [`CRATE_DIR`].
const FUNCTIONS_FILE: &str = "src/functions.rs";

/// Name of the generated function-table struct.
const TABLE_NAME: &str = "Nccl";

/// Oldest Rust the generated code must compile with (the workspace's `rust-version`).
const RUST_TARGET_MINOR: u64 = 80;

/// `#define`s that `nccl-sys` re-creates by hand in `src/macros.rs` with precise Rust types;
/// they are left out of the generated constants so that the two never clash.
const HAND_WRITTEN_MACROS: &[&str] = &[
    "NCCL_UNIQUE_ID_BYTES",
    "NCCL_SPLIT_NOCOLOR",
    "NCCL_CONFIG_UNDEF_INT",
    "NCCL_API_MAGIC",
    "NCCL_UNDEF_FLOAT",
];

/// Stub CUDA headers: what `nccl.h` needs from them, and nothing else.
const CUDA_STUBS: &[(&str, &str)] = &[
    (
        "cuda_runtime.h",
        "/* Stub for generating NCCL bindings without CUDA: size_t and opaque handles only. */\n\
         #ifndef NCCL_BINDINGS_CUDA_RUNTIME_STUB_H\n\
         #define NCCL_BINDINGS_CUDA_RUNTIME_STUB_H\n\
         #include <stddef.h>\n\
         typedef struct CUstream_st* cudaStream_t;\n\
         typedef struct CUevent_st* cudaEvent_t;\n\
         #endif\n",
    ),
    ("cuda_fp16.h", "/* Stub: nccl.h needs nothing from it. */\n"),
    ("cuda_bf16.h", "/* Stub: nccl.h needs nothing from it. */\n"),
    ("cuda_fp8.h", "/* Stub: nccl.h needs nothing from it. */\n"),
];

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The `nccl.h` to generate from.
    pub header: PathBuf,
    /// Compare instead of writing.
    pub check: bool,
}

/// Parses `--header PATH` (or `--header=PATH`) and `--check`.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut header = None;
    let mut check = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--header" => match it.next() {
                Some(path) => header = Some(PathBuf::from(path)),
                None => return Err("`--header` needs a path".to_owned()),
            },
            other => match other.strip_prefix("--header=") {
                Some(path) if !path.is_empty() => header = Some(PathBuf::from(path)),
                _ => return Err(format!("unexpected argument `{other}`")),
            },
        }
    }
    let header = header.ok_or_else(|| "`--header PATH` is required".to_owned())?;
    Ok(Options { header, check })
}

/// `cargo xtask nccl-bindings ...`.
pub fn run(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("xtask nccl-bindings: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match generate_and_apply(&options) {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask nccl-bindings: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Generates both files, then writes them or (with `--check`) compares them.
fn generate_and_apply(options: &Options) -> Result<String, String> {
    let header_text = std::fs::read(&options.header)
        .map_err(|e| format!("cannot read {}: {e}", options.header.display()))?;
    let info = HeaderInfo::parse(&header_text)?;
    check_config_initializer(&String::from_utf8_lossy(&header_text))?;
    let generated = generate(&options.header, &info)?;
    let crate_dir = workspace_root().join(CRATE_DIR);
    let files = [
        (crate_dir.join(TYPES_FILE), generated.types),
        (crate_dir.join(FUNCTIONS_FILE), generated.functions),
    ];
    if options.check {
        let mut stale = Vec::new();
        for (path, text) in &files {
            let current = std::fs::read_to_string(path).unwrap_or_default();
            if current != *text {
                stale.push(path.display().to_string());
            }
        }
        let pinned = std::fs::read_to_string(&files[0].0)
            .ok()
            .and_then(|text| pinned_sha256(&text));
        let pinned_note = match pinned {
            Some(sha) if sha != info.sha256 => {
                format!(" (the checked-in bindings come from a header with sha256 {sha})")
            }
            _ => String::new(),
        };
        if stale.is_empty() {
            Ok(format!(
                "nccl-bindings: up to date with NCCL {} (sha256 {})",
                info.version, info.sha256
            ))
        } else {
            Err(format!(
                "regenerating from {} (NCCL {}, sha256 {}) changes {}{pinned_note}; run \
                 `cargo xtask nccl-bindings --header {}` and commit the result",
                options.header.display(),
                info.version,
                info.sha256,
                stale.join(", "),
                options.header.display()
            ))
        }
    } else {
        for (path, text) in &files {
            std::fs::write(path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(format!(
            "nccl-bindings: wrote {} and {} from NCCL {} (sha256 {})",
            files[0].0.display(),
            files[1].0.display(),
            info.version,
            info.sha256
        ))
    }
}

/// What the generator records about the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderInfo {
    /// `NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH`.
    pub version: String,
    /// Lower-case hex SHA-256 of the file's bytes.
    pub sha256: String,
}

impl HeaderInfo {
    /// Reads the version `#define`s and hashes the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let text = String::from_utf8_lossy(bytes);
        let part = |name: &str| {
            define_value(&text, name)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("the header has no numeric `#define {name}`: is it nccl.h?"))
        };
        let version = format!(
            "{}.{}.{}",
            part("NCCL_MAJOR")?,
            part("NCCL_MINOR")?,
            part("NCCL_PATCH")?
        );
        Ok(HeaderInfo {
            version,
            sha256: sha256_hex(bytes),
        })
    }
}

/// The SHA-256 recorded as `BINDINGS_HEADER_SHA256` in generated types.
fn pinned_sha256(types: &str) -> Option<String> {
    let after = &types[types.find("BINDINGS_HEADER_SHA256")?..];
    let start = after.find('"')? + 1;
    let len = after[start..].find('"')?;
    Some(after[start..start + len].to_owned())
}

/// The value of `#define NAME VALUE` in `text` (first occurrence, trimmed).
fn define_value<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix('#')?.trim_start();
        let rest = rest.strip_prefix("define")?;
        let rest = rest.trim_start().strip_prefix(name)?;
        rest.starts_with([' ', '\t']).then(|| rest.trim())
    })
}

/// `nccl-sys`'s hand-written `config_initializer()` sets every field after `size`, `magic` and
/// `version` to `NCCL_CONFIG_UNDEF_INT`/`NCCL_CONFIG_UNDEF_PTR`, as the header's
/// `NCCL_CONFIG_INITIALIZER` does; a header whose initializer does anything else needs that
/// function updated by hand, so generation stops here.
pub fn check_config_initializer(header: &str) -> Result<(), String> {
    let entries = macro_body(header, "NCCL_CONFIG_INITIALIZER")
        .ok_or("the header has no `#define NCCL_CONFIG_INITIALIZER`")?;
    let squeezed: Vec<String> = entries.iter().map(|e| e.replace([' ', '\t'], "")).collect();
    let head_ok = squeezed.len() > 3
        && squeezed[0] == "sizeof(ncclConfig_t)"
        && (squeezed[1] == "NCCL_API_MAGIC" || squeezed[1].eq_ignore_ascii_case("0xcafebeef"))
        && (squeezed[2] == "NCCL_VERSION_CODE"
            || squeezed[2] == "NCCL_VERSION(NCCL_MAJOR,NCCL_MINOR,NCCL_PATCH)");
    let rest_ok = entries
        .iter()
        .skip(3)
        .all(|e| e == "NCCL_CONFIG_UNDEF_INT" || e == "NCCL_CONFIG_UNDEF_PTR");
    if head_ok && rest_ok {
        Ok(())
    } else {
        Err(format!(
            "NCCL_CONFIG_INITIALIZER is no longer size, magic, version and undefined values \
             ({entries:?}); update config_initializer() in crates/nccl-sys/src/macros.rs by hand"
        ))
    }
}

/// The comma-separated entries of a brace-initializer macro, comments and line continuations
/// removed.
fn macro_body(header: &str, name: &str) -> Option<Vec<String>> {
    let start = header.find(&format!("#define {name} {{"))?;
    let body_start = start + header[start..].find('{')? + 1;
    let mut body = String::new();
    let mut rest = &header[body_start..];
    loop {
        let (line, tail) = rest.split_once('\n').unwrap_or((rest, ""));
        let continued = line.trim_end().ends_with('\\');
        let mut line = line.trim_end().trim_end_matches('\\').to_owned();
        while let Some(open) = line.find("/*") {
            let close = line[open..].find("*/").map_or(line.len(), |c| open + c + 2);
            line.replace_range(open..close, "");
        }
        body.push_str(&line);
        body.push(' ');
        if !continued || tail.is_empty() {
            break;
        }
        rest = tail;
    }
    let body = &body[..body.rfind('}')?];
    let mut entries = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for ch in body.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                entries.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    entries.push(current);
    Some(
        entries
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// The two generated files' contents.
#[derive(Debug)]
struct Generated {
    types: String,
    functions: String,
}

/// Runs bindgen twice (types, then the function table) and formats both outputs.
fn generate(header: &Path, info: &HeaderInfo) -> Result<Generated, String> {
    let stubs = StubDir::create()?;
    let target = bindgen::RustTarget::stable(RUST_TARGET_MINOR, 0)
        .map_err(|e| format!("bindgen rejects Rust 1.{RUST_TARGET_MINOR}: {e}"))?;
    let base = || {
        bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_arg(format!("-I{}", stubs.path.display()))
            .rust_target(target)
            .formatter(bindgen::Formatter::None)
            .generate_comments(false)
            .generate_cstr(true)
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false)
            .layout_tests(true)
    };
    let provenance = format!(
        "// Generated by `cargo xtask nccl-bindings` from nccl.h of NCCL {} (sha256 {}).\n\
         // Do not edit by hand; crates/nccl-sys/HEADER.md says how to regenerate.",
        info.version, info.sha256
    );

    let mut types = base()
        .raw_line(&provenance)
        .raw_line("")
        .raw_line("/// NCCL version (`NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH`) of the `nccl.h` these bindings were generated from.")
        .raw_line(format!("pub const BINDINGS_HEADER_VERSION: &str = \"{}\";", info.version))
        .raw_line("/// SHA-256 of the `nccl.h` these bindings were generated from.")
        .raw_line(format!("pub const BINDINGS_HEADER_SHA256: &str = \"{}\";", info.sha256))
        .allowlist_type("nccl.*|NCCL.*|cudaStream_t|cudaEvent_t")
        .allowlist_var("nccl.*|NCCL.*");
    for name in HAND_WRITTEN_MACROS {
        types = types.blocklist_item(*name);
    }
    let types = types
        .generate()
        .map_err(|e| format!("bindgen (types) failed on {}: {e}", header.display()))?
        .to_string();

    let functions = base()
        .raw_line(&provenance)
        .allowlist_function("nccl.*")
        .allowlist_recursively(false)
        .dynamic_library_name(TABLE_NAME)
        .dynamic_link_require_all(false)
        .wrap_unsafe_ops(true)
        .generate()
        .map_err(|e| format!("bindgen (functions) failed on {}: {e}", header.display()))?
        .to_string();

    Ok(Generated {
        types: rustfmt(&types)?,
        functions: rustfmt(&functions)?,
    })
}

/// Formats Rust source with `rustfmt` (`$RUSTFMT`, else from `PATH`); failing to format is an
/// error, so that `--check` never compares unformatted text.
fn rustfmt(source: &str) -> Result<String, String> {
    let program = std::env::var_os("RUSTFMT").unwrap_or_else(|| "rustfmt".into());
    let mut child = Command::new(&program)
        .args(["--edition", "2021", "--emit", "stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
    let mut stdin = child.stdin.take().ok_or("rustfmt has no stdin")?;
    let input = source.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(|e| format!("rustfmt failed: {e}"))?;
    writer
        .join()
        .map_err(|_| "the thread feeding rustfmt panicked".to_owned())?
        .map_err(|e| format!("cannot feed rustfmt: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "rustfmt exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("rustfmt wrote invalid UTF-8: {e}"))
}

/// A temporary directory holding [`CUDA_STUBS`], removed on drop.
struct StubDir {
    path: PathBuf,
}

impl StubDir {
    fn create() -> Result<Self, String> {
        let path =
            std::env::temp_dir().join(format!("nccl-bindings-cuda-stubs-{}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let dir = StubDir { path };
        for (name, text) in CUDA_STUBS {
            let file = dir.path.join(name);
            std::fs::write(&file, text)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        }
        Ok(dir)
    }
}

impl Drop for StubDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temp dir is harmless.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// SHA-256 (FIPS 180-4) of `data`, as lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut message = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bit_len.to_be_bytes());
    for block in message.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (slot, v) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *slot = slot.wrapping_add(v);
        }
    }
    let mut hex = String::with_capacity(64);
    for word in h {
        let _ = write!(hex, "{word:08x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_header_and_check() {
        let o = parse_args(&args(&["--header", "/x/nccl.h", "--check"])).unwrap();
        assert_eq!(o.header, PathBuf::from("/x/nccl.h"));
        assert!(o.check);
        let o = parse_args(&args(&["--header=/y/nccl.h"])).unwrap();
        assert_eq!(o.header, PathBuf::from("/y/nccl.h"));
        assert!(!o.check);
    }

    #[test]
    fn rejects_missing_header_and_unknown_flags() {
        assert!(parse_args(&args(&["--check"])).is_err());
        assert!(parse_args(&args(&["--header"])).is_err());
        assert!(parse_args(&args(&["--header", "a", "--bogus"])).is_err());
    }

    #[test]
    fn sha256_known_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        // Crosses a block boundary with the length in the second padding block.
        assert_eq!(
            sha256_hex(&[b'a'; 1000]),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
        );
    }

    const MINI_HEADER: &str = "\
#define NCCL_MAJOR 2
#define NCCL_MINOR 18
#define NCCL_PATCH 1
#define NCCL_CONFIG_INITIALIZER {                                       \\
  sizeof(ncclConfig_t), /* size */                                      \\
  NCCL_API_MAGIC,       /* magic */                                     \\
  NCCL_VERSION_CODE,    /* version */                                   \\
  NCCL_CONFIG_UNDEF_INT,                    /* blocking */              \\
  NCCL_CONFIG_UNDEF_PTR,                    /* netName */               \\
}
";

    #[test]
    fn reads_version_defines() {
        let info = HeaderInfo::parse(MINI_HEADER.as_bytes()).unwrap();
        assert_eq!(info.version, "2.18.1");
        assert_eq!(info.sha256.len(), 64);
        assert!(HeaderInfo::parse(b"int x;").is_err());
    }

    #[test]
    fn finds_the_pinned_sha256() {
        let types = "pub const BINDINGS_HEADER_SHA256: &str =\n    \"abc123\";\n";
        assert_eq!(pinned_sha256(types).as_deref(), Some("abc123"));
        assert_eq!(pinned_sha256("nothing here"), None);
    }

    #[test]
    fn accepts_an_all_undefined_config_initializer() {
        assert_eq!(check_config_initializer(MINI_HEADER), Ok(()));
    }

    #[test]
    fn accepts_the_older_spelling_of_magic_and_version() {
        let older = MINI_HEADER
            .replace("NCCL_API_MAGIC,  ", "0xcafebeef,")
            .replace(
                "NCCL_VERSION_CODE,",
                "NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),",
            );
        assert_ne!(older, MINI_HEADER);
        assert_eq!(check_config_initializer(&older), Ok(()));
    }

    #[test]
    fn rejects_a_config_initializer_with_a_real_default() {
        let changed = MINI_HEADER.replace("NCCL_CONFIG_UNDEF_PTR,", "1,");
        let err = check_config_initializer(&changed).unwrap_err();
        assert!(err.contains("macros.rs"), "{err}");
    }
}
