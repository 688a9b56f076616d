//! `nicmsg pdl compile` and `nicmsg pdl disasm`, run as the command a user runs: exit status,
//! files written, errors rendered with a caret.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NICMSG: &str = env!("CARGO_BIN_EXE_nicmsg");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nicmsg-pdl-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("make the directory");
    dir
}

fn nicmsg(args: &[&str]) -> Output {
    Command::new(NICMSG)
        .args(args)
        .output()
        .expect("run nicmsg")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

const PROGRAM: &str = "PROGRAM tiny:\nVAR x, buf[4];\nTRIGGERS 7;\nBEGIN x = 1 END;\nMESSAGE 7: BEGIN\n  SEND buf LEN 32 AS 7 TO tiny AT MSGSRC\nEND;\nEND.\n";

#[test]
fn compile_writes_the_module_beside_the_source_or_where_asked() {
    let dir = scratch("compile");
    let source = dir.join("tiny.pdl");
    fs::write(&source, PROGRAM).expect("write the source");

    let out = nicmsg(&["pdl", "compile", path(&source)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let default = dir.join("tiny.pdlm");
    let module = nicmsg_pdl::Module::decode(&fs::read(&default).expect("tiny.pdlm written"))
        .expect("a valid module");
    assert_eq!(module.name, "tiny");
    assert!(text(&out.stdout).contains("tiny.pdlm"));

    let elsewhere = dir.join("other.bin");
    let out = nicmsg(&["pdl", "compile", path(&source), "-o", path(&elsewhere)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        fs::read(&elsewhere).expect("written"),
        fs::read(&default).unwrap()
    );

    let listing = nicmsg(&["pdl", "disasm", path(&elsewhere)]);
    assert_eq!(listing.status.code(), Some(0));
    let listing = text(&listing.stdout);
    assert!(listing.starts_with("module tiny:"), "{listing}");
    assert!(listing.contains("message 7:"), "{listing}");
    assert!(listing.contains("SEND 8+32"), "{listing}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn compile_errors_are_rendered_with_file_line_column_and_a_caret_and_exit_1() {
    let dir = scratch("errors");
    let source = dir.join("bad.pdl");
    let program = "PROGRAM bad:\nVAR x;\nBEGIN\n  x = y + 1;\n  z = 2\nEND;\nEND.\n";
    fs::write(&source, program).expect("write the source");
    let out = nicmsg(&["pdl", "compile", path(&source)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let file = path(&source);
    let expected_first = format!(
        "error: undeclared name `y`\n --> {file}:4:7\n  |\n4 |   x = y + 1;\n  |       ^ not declared in any VAR or CONST section\n"
    );
    assert!(stderr.starts_with(&expected_first), "{stderr}");
    assert!(stderr.contains(&format!("--> {file}:5:3")), "{stderr}");
    assert!(stderr.contains("due to 2 errors"), "{stderr}");
    assert!(
        !dir.join("bad.pdlm").exists(),
        "no module for a program with errors"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn unreadable_files_and_malformed_modules_exit_1_with_the_reason() {
    let dir = scratch("unreadable");
    let out = nicmsg(&["pdl", "compile", path(&dir.join("missing.pdl"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("missing.pdl"));

    let garbage = dir.join("garbage.pdlm");
    // A header's worth of bytes with the right magic and version, and nothing right after.
    let mut bytes = b"PDLM\x01\x00".to_vec();
    bytes.resize(40, 7);
    fs::write(&garbage, bytes).expect("write");
    let out = nicmsg(&["pdl", "disasm", path(&garbage)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("checksum mismatch"),
        "{}",
        text(&out.stderr)
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["pdl"][..],
        &["pdl", "compile"],
        &["pdl", "frobnicate", "x"],
        &["pdl", "compile", "a.pdl", "--bogus"],
    ] {
        let out = nicmsg(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// The examples in examples/pdl, the paper's figures 2 and 4 among them, compile with the
/// command and list with `disasm`, each trigger block labelled.
#[test]
fn every_example_compiles_and_lists_with_the_command() {
    let dir = scratch("examples");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pdl");
    let mut names: Vec<PathBuf> = fs::read_dir(&examples)
        .expect("examples/pdl")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pdl"))
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    for source in names {
        let stem = source.file_stem().unwrap().to_string_lossy().into_owned();
        let module = dir.join(format!("{stem}.pdlm"));
        let out = nicmsg(&["pdl", "compile", path(&source), "-o", path(&module)]);
        assert_eq!(out.status.code(), Some(0), "{stem}: {}", text(&out.stderr));
        let listing = nicmsg(&["pdl", "disasm", path(&module)]);
        assert_eq!(listing.status.code(), Some(0), "{stem}");
        let listing = text(&listing.stdout);
        assert!(listing.starts_with(&format!("module {stem}:")), "{listing}");
        let decoded = nicmsg_pdl::Module::decode(&fs::read(&module).unwrap()).unwrap();
        for t in &decoded.triggers {
            assert!(
                listing.contains(&format!("message {}:", t.trigger)),
                "{stem}: {listing}"
            );
        }
    }
    let _ = fs::remove_dir_all(&dir);
}
