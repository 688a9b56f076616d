//! The compiler never panics, whatever it is given, and whatever it accepts is a module that
//! passes the verifier and survives encoding.
//!
//! Two sources of input: every example program with every single token deleted, duplicated or
//! replaced (a deterministic loop, so any failure names the example and the mutation), and
//! proptest's random token soups and random text.

use std::path::PathBuf;

use nicmsg_pdl::{compile, render_all, verify, Module};
use proptest::prelude::*;

/// Compiles `source`; an accepted program must verify and round-trip, and errors must render.
fn compile_checked(source: &str) {
    match compile(source) {
        Ok(module) => {
            verify(&module).unwrap_or_else(|e| {
                panic!("the compiler emitted a module the verifier refuses: {e}\n{source}")
            });
            let bytes = module.encode().expect("an emitted module encodes");
            assert_eq!(Module::decode(&bytes).as_ref(), Ok(&module));
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "a failure carries its errors");
            assert!(errors.len() <= nicmsg_pdl::limits::MAX_ERRORS);
            let text = render_all("fuzz.pdl", source, &errors);
            assert!(text.contains("--> fuzz.pdl:"), "{text}");
        }
    }
}

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/pdl");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("examples/pdl")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pdl"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read");
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect();
    out.sort();
    out
}

/// Byte ranges of the words and symbols of `source` (a rough tokenisation: runs of word
/// characters, and single other non-space characters).
fn rough_tokens(source: &str) -> Vec<(usize, usize)> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        if bytes[i].is_ascii_whitespace() {
            i += 1;
        } else if word(bytes[i]) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            out.push((start, i));
        } else {
            let len = source[i..].chars().next().map_or(1, char::len_utf8);
            out.push((i, i + len));
            i += len;
        }
    }
    out
}

/// Replacements tried at every token: each changes what the parser or the checker sees there.
const REPLACEMENTS: &[&str] = &[
    "",
    ";",
    "END",
    "BEGIN",
    "(",
    ")",
    "[",
    "]",
    "0",
    "-1",
    "99999",
    "x",
    "msg",
    "AWAIT",
    "IF",
    "WHILE",
    "ELSE",
    "MESSAGE",
    "SEND",
    ":",
    "=",
    "0x",
    "9223372036854775808",
    "é",
];

#[test]
fn every_example_mutated_at_every_token_compiles_or_reports_without_panicking() {
    let mut compiled = 0usize;
    for (name, source) in examples() {
        for (start, end) in rough_tokens(&source) {
            let token = &source[start..end];
            let mut variants: Vec<String> = REPLACEMENTS
                .iter()
                .map(|r| format!("{}{r}{}", &source[..start], &source[end..]))
                .collect();
            variants.push(format!(
                "{}{token} {token}{}",
                &source[..start],
                &source[end..]
            ));
            // Cut the program short right after the token.
            variants.push(source[..end].to_string());
            for variant in variants {
                let result = std::panic::catch_unwind(|| compile_checked(&variant));
                assert!(
                    result.is_ok(),
                    "{name}: panicked at token {token:?} (byte {start}) on:\n{variant}"
                );
                compiled += 1;
            }
        }
    }
    assert!(compiled > 10_000, "{compiled} variants");
}

/// The vocabulary of token soups: every keyword, names, numbers, punctuation.
const WORDS: &[&str] = &[
    "PROGRAM",
    "VAR",
    "CONST",
    "TRIGGERS",
    "BEGIN",
    "END",
    "MESSAGE",
    "IF",
    "THEN",
    "ELSE",
    "WHILE",
    "DO",
    "SEND",
    "LEN",
    "AS",
    "TO",
    "AT",
    "AWAIT",
    "STOP",
    "CLOCK",
    "DISPLAY",
    "DELIVER",
    "OFFSET",
    "INTO",
    "GET",
    "FROM",
    "AND",
    "OR",
    "NOT",
    "MOD",
    "CLEARLOCK",
    "SETFLAG",
    "LOCKED",
    "MSGLEN",
    "MSGSRC",
    "RANK",
    "NRANKS",
    "RECEIVE",
    "REPLY",
    "DROP",
    "PASS",
    "p",
    "x",
    "a",
    "msg",
    "0",
    "1",
    "7",
    "8",
    "64",
    "4096",
    "65536",
    "-",
    "+",
    "*",
    "/",
    ":",
    ";",
    ",",
    ".",
    "[",
    "]",
    "(",
    ")",
    ":=",
    "=",
    "==",
    "<>",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "#",
    "\n",
    "0x10",
];

/// A skeleton that parses, so soups inside it reach the checker and the code generator.
fn in_skeleton(body: &str) -> String {
    format!(
        "PROGRAM p: CONST c = 3; VAR x, a[4], msg[8]; TRIGGERS 1, 2;\n\
         BEGIN {body} END;\nMESSAGE 1: BEGIN {body} END;\nMESSAGE 2: BEGIN x = 1 END;\nEND.\n"
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn token_soups_never_panic(words in prop::collection::vec(prop::sample::select(WORDS), 0..60)) {
        let soup = words.join(" ");
        compile_checked(&soup);
        compile_checked(&in_skeleton(&soup));
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        compile_checked(&text);
        compile_checked(&in_skeleton(&text));
    }

    #[test]
    fn random_statements_in_a_valid_program_compile_and_verify(
        stmts in prop::collection::vec(statement(), 0..12)
    ) {
        let source = in_skeleton(&stmts.join(";\n"));
        // Every statement the strategy makes is valid, so the program must compile.
        if let Err(errors) = compile(&source) {
            panic!("{}", render_all("random.pdl", &source, &errors));
        }
        compile_checked(&source);
    }
}

/// Valid statements over the skeleton's names, with run-time indices and operands.
fn statement() -> impl Strategy<Value = String> {
    let expr = prop::sample::select(vec![
        "x",
        "a[x]",
        "a[3]",
        "c",
        "x + 1",
        "x * c - a[1]",
        "CLOCK",
        "MSGLEN",
        "MSGSRC",
        "RANK",
        "NRANKS",
        "LOCKED(3)",
        "x MOD 3",
        "x / 2",
        "NOT x",
        "x < 3 AND a[0] >= x OR x = 7",
        "-x",
        "(x + (x + (x + 1)))",
    ]);
    let leaf = (expr.clone(), expr).prop_flat_map(|(e1, e2)| {
        prop::sample::select(vec![
            format!("x = {e1}"),
            format!("a[{e1}] = {e2}"),
            format!("DISPLAY {e1}"),
            format!("IF {e1} THEN x = {e2} ELSE a[0] = {e1}"),
            format!("IF {e1} THEN BEGIN x = {e2}; AWAIT END"),
            format!("WHILE x < 10 DO x = x + 1"),
            format!("SEND msg LEN 64 AS 2 TO p AT {e1}"),
            format!("SEND msg[{e1}] LEN 8 AS 1 TO 7"),
            format!("DELIVER a[1] OFFSET {e1} INTO 2 LEN 24"),
            format!("GET msg FROM 1 OFFSET 0 LEN {e2}"),
            format!("RECEIVE a OFFSET {e1} LEN 16"),
            format!("SETFLAG {e1}"),
            format!("CLEARLOCK 5"),
            "STOP".to_string(),
            "AWAIT".to_string(),
        ])
    });
    leaf
}
