//! The checked-in header is what cbindgen makes of the crate now: a change to the ABI that
//! leaves `include/weft.h` behind fails here (`WEFT_BLESS=1` writes the new one).

use std::path::Path;

#[test]
fn the_checked_in_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut made);
    let path = dir.join("include/weft.h");
    if std::env::var_os("WEFT_BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let kept = std::fs::read(&path).unwrap_or_default();
    assert!(
        kept == made,
        "capi/include/weft.h is stale: run `WEFT_BLESS=1 cargo test -p weft-c --test header` \
         and commit it"
    );
}
