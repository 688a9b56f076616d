//! `include/nicmsg.h` is written by hand (it is the C programmer's documentation); this test
//! keeps it equal to the Rust side: every result code of `enum nicmsg_result` against the one
//! table of codes (`nicmsg::Code`), every `#define NICMSG_*` against the constant of
//! `nicmsg::capi`, every structure's fields, and every function declared against the
//! `#[no_mangle] extern "C" fn` of `src/capi.rs` with the same name: both directions, with the
//! parameters' count and types and the return type.

use nicmsg::capi;
use nicmsg::Code;
use std::collections::BTreeMap;
use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The header without comments and preprocessor lines other than `#define`.
fn header() -> String {
    without_comments(&read("../../include/nicmsg.h"))
}

fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("unterminated comment") + start + 2;
        out.push(' ');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|line| !line.trim_start().starts_with('#') || line.contains("#define"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The C ABI's Rust side: `capi.rs`, the programs' part, `capi_programs.rs`, and the
/// datagram sockets' parts, `capi_dgram.rs` and `capi_lm_dgram.rs`.
fn capi_source() -> String {
    read("src/capi.rs")
        + &read("src/capi_programs.rs")
        + &read("src/capi_dgram.rs")
        + &read("src/capi_lm_dgram.rs")
}

/// The text between `open` at `from` and its matching `close`.
fn balanced(text: &str, from: usize, open: char, close: char) -> (&str, usize) {
    let mut depth = 0;
    for (offset, c) in text[from..].char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return (&text[from + 1..from + offset], from + offset + 1);
            }
        }
    }
    panic!("unbalanced {open}{close} at {from}");
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A C type (`const nicmsg_comm *`, `nicmsg_request **`, `const struct iovec *`, `size_t`)
/// as the Rust type of the ABI (`*const NicmsgComm`, ...).
fn c_type_as_rust(c: &str) -> String {
    let spaced = c.replace('*', " * ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let stars = tokens.iter().filter(|&&t| t == "*").count();
    let is_const = tokens.first() == Some(&"const");
    let base: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|&t| t != "*" && t != "const")
        .collect();
    let base = match base.join(" ").as_str() {
        "void" => "c_void",
        "char" => "c_char",
        "int" => "c_int",
        "size_t" => "usize",
        "uint8_t" => "u8",
        "uint16_t" => "u16",
        "uint32_t" => "u32",
        "uint64_t" => "u64",
        "int64_t" => "i64",
        "nicmsg_comm" => "NicmsgComm",
        "nicmsg_request" => "NicmsgRequest",
        "nicmsg_dgram" => "NicmsgDgram",
        "nicmsg_lm_dgram" => "NicmsgLmDgram",
        "nicmsg_status" => "NicmsgStatus",
        "struct iovec" => "libc::iovec",
        other => panic!("no Rust type known for the C type {other:?} (in {c:?})"),
    }
    .to_string();
    let mut rust = base;
    for star in 0..stars {
        let qualifier = if star == 0 && is_const {
            "const"
        } else {
            "mut"
        };
        rust = format!("*{qualifier} {rust}");
    }
    rust
}

fn normalise_rust_type(rust: &str) -> String {
    rust.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A C declaration `type name` split into (name, type).
fn c_declaration(declaration: &str) -> (String, String) {
    let declaration = declaration.trim();
    let name_start = declaration
        .rfind(|c: char| !is_ident(c))
        .map_or(0, |i| i + 1);
    (
        declaration[name_start..].to_string(),
        declaration[..name_start].trim().to_string(),
    )
}

#[derive(Debug, PartialEq, Eq)]
struct Signature {
    params: Vec<String>,
    ret: String,
}

/// Every function the header declares: name -> Rust types of its parameters and result.
fn header_functions(header: &str) -> BTreeMap<String, Signature> {
    let mut found = BTreeMap::new();
    let mut search = 0;
    while let Some(at) = header[search..].find("nicmsg_") {
        let start = search + at;
        search = start + 1;
        if start > 0 && is_ident(header[..start].chars().next_back().unwrap()) {
            continue;
        }
        let name_end = start
            + header[start..]
                .find(|c: char| !is_ident(c))
                .unwrap_or(header.len() - start);
        let after = header[name_end..].trim_start();
        if !after.starts_with('(') {
            continue;
        }
        let open = header.len() - after.len();
        let (params, close) = balanced(header, open, '(', ')');
        if !header[close..].trim_start().starts_with(';') {
            continue;
        }
        let ret_start = header[..start].rfind([';', '{', '}']).map_or(0, |i| i + 1);
        let ret = c_type_as_rust(&header[ret_start..start]);
        let params = if params.trim() == "void" {
            vec![]
        } else {
            params
                .split(',')
                .map(|p| c_type_as_rust(&c_declaration(p).1))
                .collect()
        };
        let name = header[start..name_end].to_string();
        assert!(
            found
                .insert(name.clone(), Signature { params, ret })
                .is_none(),
            "{name} declared twice"
        );
    }
    found
}

/// Every `#[no_mangle]` function of `capi.rs`: name -> Rust types of its parameters and result.
fn rust_functions(source: &str) -> BTreeMap<String, Signature> {
    let mut found = BTreeMap::new();
    for (at, _) in source.match_indices("#[no_mangle]") {
        let fn_at = at
            + source[at..]
                .find("fn ")
                .expect("a function follows #[no_mangle]")
            + 3;
        let open = fn_at + source[fn_at..].find('(').unwrap();
        let name = source[fn_at..open].trim().to_string();
        let declaration = &source[at..fn_at];
        assert!(
            declaration.contains("extern \"C\""),
            "{name} is #[no_mangle] but not extern \"C\""
        );
        let (params, close) = balanced(source, open, '(', ')');
        let params = params
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| normalise_rust_type(p.split_once(':').expect("name: type").1))
            .collect();
        let rest = &source[close..];
        let body = rest.find('{').unwrap();
        let ret = rest[..body]
            .trim()
            .strip_prefix("->")
            .map_or("()".to_string(), normalise_rust_type);
        assert!(
            found
                .insert(name.clone(), Signature { params, ret })
                .is_none(),
            "{name} defined twice"
        );
    }
    found
}

#[test]
fn every_function_is_declared_in_the_header_with_the_same_signature() {
    let declared = header_functions(&header());
    let defined = rust_functions(&capi_source());
    assert!(declared.len() >= 10, "the parser found only {declared:?}");
    for (name, signature) in &defined {
        let Some(declaration) = declared.get(name) else {
            panic!("{name} is exported by capi.rs but not declared in include/nicmsg.h");
        };
        assert_eq!(
            declaration.params.len(),
            signature.params.len(),
            "{name}: the header declares {} parameters, capi.rs defines {}",
            declaration.params.len(),
            signature.params.len()
        );
        assert_eq!(
            declaration, signature,
            "{name}: header (left) and capi.rs differ"
        );
    }
    for name in declared.keys() {
        assert!(
            defined.contains_key(name),
            "{name} is declared in include/nicmsg.h but capi.rs does not export it"
        );
    }
}

#[test]
fn every_result_code_of_the_header_is_the_rust_code_of_that_name() {
    let header = header();
    let start = header
        .find("enum nicmsg_result")
        .expect("enum nicmsg_result");
    let open = start + header[start..].find('{').unwrap();
    let (body, _) = balanced(&header, open, '{', '}');
    let mut declared = BTreeMap::new();
    for entry in body.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry.split_once('=').expect("NAME = value");
        let value: i32 = value.trim().parse().expect("a literal value");
        assert!(
            declared.insert(name.trim().to_string(), value).is_none(),
            "{name} twice"
        );
    }
    for &code in Code::ALL {
        assert_eq!(
            declared.get(code.c_name()),
            Some(&(code as i32)),
            "{} is {} in Rust; the header has {:?}",
            code.c_name(),
            code as i32,
            declared.get(code.c_name())
        );
    }
    for (name, value) in &declared {
        let code = Code::from_value(*value)
            .unwrap_or_else(|| panic!("{name} = {value} in the header is no Rust code"));
        assert_eq!(code.c_name(), name, "{value} has another name in Rust");
    }
    assert_eq!(declared.len(), Code::ALL.len());
    // The constants of capi are the table's.
    assert_eq!(capi::NICMSG_ERR_PANIC, Code::Panic as i32);
    assert_eq!(capi::NICMSG_ERR_INTERNAL, Code::EngineFailed as i32);
    assert_eq!(capi::NICMSG_SUCCESS, 0);
}

#[test]
fn every_define_of_the_header_is_the_rust_constant() {
    let rust: BTreeMap<&str, u64> = [
        ("NICMSG_ANY_SOURCE", u64::from(capi::NICMSG_ANY_SOURCE)),
        ("NICMSG_ANY_TAG", u64::from(capi::NICMSG_ANY_TAG)),
        ("NICMSG_TAG_UB", u64::from(capi::NICMSG_TAG_UB)),
        ("NICMSG_IOV_MAX", capi::NICMSG_IOV_MAX as u64),
        ("NICMSG_UNDEFINED", capi::NICMSG_UNDEFINED as u64),
        ("NICMSG_ALL_PROGRAMS", u64::from(capi::NICMSG_ALL_PROGRAMS)),
        ("NICMSG_ADDRESS_MAX", capi::NICMSG_ADDRESS_MAX as u64),
    ]
    .into();
    let header = header();
    let mut declared = BTreeMap::new();
    for line in header.lines().filter(|l| l.contains("#define")) {
        let mut words = line.split_whitespace().skip(1);
        let name = words.next().expect("a name");
        let Some(value) = words.next() else {
            continue; // the include guard
        };
        let value = match value {
            "UINT32_MAX" => u64::from(u32::MAX),
            "SIZE_MAX" => usize::MAX as u64,
            literal => literal
                .trim_end_matches(['u', 'U'])
                .parse()
                .unwrap_or_else(|_| panic!("{name}: cannot read {literal}")),
        };
        declared.insert(name, value);
    }
    assert_eq!(declared, rust, "header (left) and capi.rs differ");
    // And capi.rs has no other public NICMSG_ constant the header lacks (the codes are the
    // table's, checked above).
    let source = capi_source();
    for (at, _) in source.match_indices("pub const NICMSG_") {
        let name = &source[at + 10..];
        let name = &name[..name.find(':').unwrap()];
        assert!(declared.contains_key(name), "{name} is not in the header");
    }
}

/// `typedef struct tag { fields } name;` of the header and `#[repr(C)] pub struct` of capi.rs,
/// and the opaque handles.
#[test]
fn every_structure_has_the_same_fields_in_the_header() {
    let header = header();
    let source = capi_source();
    // Opaque handles: declared in the header, defined in the C ABI's sources (a structure, or
    // an alias of the datagram sockets' generic handle).
    for (c_name, rust_name) in [
        ("nicmsg_comm", "NicmsgComm"),
        ("nicmsg_request", "NicmsgRequest"),
        ("nicmsg_dgram", "NicmsgDgram"),
        ("nicmsg_lm_dgram", "NicmsgLmDgram"),
    ] {
        assert!(
            header.contains(&format!("typedef struct {rust_name} {c_name};")),
            "{c_name}"
        );
        let defined = source.contains(&format!("pub struct {rust_name} {{"))
            || source.contains(&format!("pub type {rust_name} = DgramHandle<"));
        assert!(defined, "{rust_name} is defined");
    }
    // Structures with fields.
    let mut c_structs = BTreeMap::new();
    for (at, _) in header.match_indices("typedef struct") {
        let Some(open) = header[at..].find('{').map(|i| at + i) else {
            continue;
        };
        if header[at..open].contains(';') {
            continue; // an opaque typedef
        }
        let (body, close) = balanced(&header, open, '{', '}');
        let name_end = close + header[close..].find(';').unwrap();
        let name = header[close..name_end].trim();
        let fields: Vec<(String, String)> = body
            .split(';')
            .filter(|f| !f.trim().is_empty())
            .map(|f| {
                let (field, ty) = c_declaration(f);
                (field, c_type_as_rust(&ty))
            })
            .collect();
        c_structs.insert(c_type_as_rust(name), fields);
    }
    let mut rust_structs = BTreeMap::new();
    for (at, _) in source.match_indices("#[repr(C)]\npub struct ") {
        let name_start = at + "#[repr(C)]\npub struct ".len();
        let open = name_start + source[name_start..].find('{').unwrap();
        let name = source[name_start..open].trim().to_string();
        let (body, _) = balanced(&source, open, '{', '}');
        let fields: Vec<(String, String)> = body
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(|f| {
                let (field, ty) = f
                    .trim_start_matches("pub ")
                    .split_once(':')
                    .expect("field: type");
                (field.trim().to_string(), normalise_rust_type(ty))
            })
            .collect();
        rust_structs.insert(name, fields);
    }
    assert!(rust_structs.contains_key("NicmsgStatus"));
    assert_eq!(c_structs, rust_structs, "header (left) and capi.rs differ");
}

#[test]
fn the_parsers_see_what_they_should() {
    assert_eq!(c_type_as_rust("const nicmsg_comm *"), "*const NicmsgComm");
    assert_eq!(
        c_type_as_rust("nicmsg_request **"),
        "*mut *mut NicmsgRequest"
    );
    assert_eq!(c_type_as_rust("const struct iovec *"), "*const libc::iovec");
    assert_eq!(c_type_as_rust("const char *"), "*const c_char");
    let functions = header_functions(&without_comments(
        "int nicmsg_a(const nicmsg_comm *comm, size_t n);\n/* x */ const char *nicmsg_b(int code);",
    ));
    assert_eq!(functions.len(), 2);
    assert_eq!(
        functions["nicmsg_a"],
        Signature {
            params: vec!["*const NicmsgComm".into(), "usize".into()],
            ret: "c_int".into()
        }
    );
    assert_eq!(functions["nicmsg_b"].ret, "*const c_char");
}
