//! Every error message of the compiler, each on a program that provokes it: the message, the
//! position (`file:line:column`) and the caret line under the culprit, as `nicmsg pdl compile`
//! prints them.
//!
//! Each case is `(source, message, line:column, caret)`, where `caret` is the rendered line
//! under the source line, after the gutter: spaces, the carets, and the label. The case passes
//! when some error of the program has exactly that message, position and caret line.

use nicmsg_pdl::{compile, limits, render_all, Diagnostic};

/// A one-line program around `body` (the init block), so carets are easy to read: line 1 is
/// `PROGRAM p: VAR x, a[4]; CONST c = 3; TRIGGERS 5;`, line 2 the init block, line 3 trigger 5.
fn init(body: &str) -> String {
    format!("PROGRAM p: VAR x, a[4]; CONST c = 3; TRIGGERS 5;\nBEGIN {body} END;\nMESSAGE 5: BEGIN x = 1 END;\nEND.\n")
}

/// The same program with `body` in trigger 5's block (line 3).
fn handler(body: &str) -> String {
    format!("PROGRAM p: VAR x, a[4]; CONST c = 3; TRIGGERS 5;\nBEGIN x = 0 END;\nMESSAGE 5: BEGIN {body} END;\nEND.\n")
}

fn render(d: &Diagnostic, source: &str) -> String {
    d.render("t.pdl", source)
}

/// Checks that compiling `source` reports `message` at `at` with the caret line `caret`.
fn check(source: &str, message: &str, at: &str, caret: &str) {
    let errors = match compile(source) {
        Ok(_) => panic!("expected `{message}`, but this compiles:\n{source}"),
        Err(errors) => errors,
    };
    let all = render_all("t.pdl", source, &errors);
    let Some(d) = errors.iter().find(|d| d.message == message) else {
        panic!("expected `{message}`; got:\n{all}");
    };
    let text = render(d, source);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("error: {message}"), "{text}");
    assert!(
        lines[1].ends_with(&format!("--> t.pdl:{at}")),
        "expected position {at}:\n{text}"
    );
    let gutter = lines[1].find("-->").expect("an arrow");
    let caret_line = lines[4].get(gutter + 3..).unwrap_or("");
    assert_eq!(caret_line, caret, "caret line of `{message}`:\n{text}");
    // The source line is the one the position names.
    let line: usize = at.split(':').next().unwrap().parse().unwrap();
    let shown = source.lines().nth(line - 1).unwrap().replace('\t', "    ");
    assert!(lines[3].ends_with(&shown), "{text}");
}

#[test]
fn lexical_errors() {
    check(
        &init("x = 1 $ 2"),
        "unexpected character `$`",
        "2:13",
        "            ^ not part of PDL",
    );
    check(
        &init("x = 12ab"),
        "invalid integer literal",
        "2:11",
        "          ^^^^ not a decimal number",
    );
    check(
        &init("x = 0xZZ"),
        "invalid integer literal",
        "2:11",
        "          ^^^^ not a hexadecimal number",
    );
    check(
        &init("x = 99999999999999999999"),
        "integer literal out of range",
        "2:11",
        "          ^^^^^^^^^^^^^^^^^^^^ larger than 2^63 - 1",
    );
    let long = "n".repeat(limits::MAX_NAME_LEN + 1);
    check(
        &format!("PROGRAM {long}: END."),
        "name too long",
        "1:9",
        &format!("        {} 65 characters; at most 64", "^".repeat(65)),
    );
    let huge = format!("{}{}", init("x = 1"), " ".repeat(limits::MAX_SOURCE_BYTES));
    check(
        &huge,
        "source file too large",
        "1:1",
        &format!("^ {} bytes; at most 1048576", huge.len()),
    );
}

#[test]
fn the_program_and_its_declarations() {
    check(
        "x = 1",
        "expected `PROGRAM` at the start of the program, found name `x`",
        "1:1",
        "^",
    );
    check(
        "PROGRAM len: END.",
        "expected the program's name, found the keyword `LEN`",
        "1:9",
        "        ^^^ keywords are reserved",
    );
    check(
        "PROGRAM p VAR x; END.",
        "expected `:` after the program's name, found `VAR`",
        "1:11",
        "          ^^^",
    );
    check(
        "PROGRAM p: VAR x y; END.",
        "expected `,` or `;` in the `VAR` list, found name `y`",
        "1:18",
        "                 ^",
    );
    check(
        "PROGRAM p: VAR 5; END.",
        "expected a variable name here, found number `5`",
        "1:16",
        "               ^",
    );
    check(
        "PROGRAM p: VAR x, Len; END.",
        "expected a variable name, found the keyword `LEN`",
        "1:19",
        "                  ^^^ keywords are reserved",
    );
    check(
        "PROGRAM p: CONST 5 = 1; END.",
        "expected a constant name here, found number `5`",
        "1:18",
        "                 ^",
    );
    check(
        "PROGRAM p: VAR a[4; END.",
        "expected `]` after the array size, found `;`",
        "1:19",
        "                  ^",
    );
    check(
        "PROGRAM p: CONST c 3; END.",
        "expected `=` after the constant's name, found number `3`",
        "1:20",
        "                   ^",
    );
    check(
        "PROGRAM p: TRIGGERS 5; MESSAGE 5 BEGIN END; END.",
        "expected `:` after the trigger number, found `BEGIN`",
        "1:34",
        "                                 ^^^^^",
    );
    check(
        "PROGRAM p: TRIGGERS 5; MESSAGE 5: AWAIT; END.",
        "expected `BEGIN` to open a block, found `AWAIT`",
        "1:35",
        "                                  ^^^^^",
    );
    check(
        "PROGRAM p: BEGIN AWAIT END; x END.",
        "expected `MESSAGE` or `END` closing the program, found name `x`",
        "1:29",
        "                            ^",
    );
    check(
        "PROGRAM p: BEGIN AWAIT END; END. x",
        "unexpected name `x` after the end of the program",
        "1:34",
        "                                 ^ the program ended with the END before this",
    );
}

#[test]
fn declarations_checked_for_meaning() {
    check(
        "PROGRAM p: VAR x, x; END.",
        "`x` is declared twice",
        "1:19",
        "                  ^ declared again here",
    );
    check(
        "PROGRAM p: VAR a[0]; END.",
        "array size 0 out of range",
        "1:18",
        "                 ^ must be 1 to 8192",
    );
    check(
        "PROGRAM p: VAR a[x]; END.",
        "an array size must be a constant",
        "1:18",
        "                 ^ `x` is not declared (before this point)",
    );
    check(
        "PROGRAM p: VAR x; CONST c = x; END.",
        "a constant's value must be a constant",
        "1:29",
        "                            ^ `x` is a variable",
    );
    check(
        "PROGRAM p: CONST z = 1 / 0; END.",
        "division by zero",
        "1:22",
        "                     ^^^^^ the divisor is 0",
    );
    check(
        "PROGRAM p: VAR a[8192], b; END.",
        "data section too large",
        "1:25",
        "                        ^ the variables would need 65544 bytes; at most 65536",
    );
    check(
        "PROGRAM p: TRIGGERS 5, 5; MESSAGE 5: BEGIN END; END.",
        "trigger 5 is declared twice",
        "1:24",
        "                       ^ declared again here",
    );
    check(
        "PROGRAM p: TRIGGERS 70000; END.",
        "trigger number 70000 out of range",
        "1:21",
        "                    ^^^^^ must be 0 to 65535",
    );
    check(
        "PROGRAM p: TRIGGERS CLOCK; END.",
        "a trigger number must be a constant",
        "1:21",
        "                    ^^^^^ known only at run time",
    );

    let many = |section: &str, item: &dyn Fn(usize) -> String, n: usize| {
        let items: Vec<String> = (0..n).map(item).collect();
        format!("PROGRAM p:\n{section} {};\nEND.", items.join(", "))
    };
    let source = many(
        "CONST",
        &|i| format!("c{i} = {i}"),
        limits::MAX_CONSTANTS + 1,
    );
    let column = source.lines().nth(1).unwrap().find("c256").unwrap() + 1;
    check(
        &source,
        "too many constants",
        &format!("2:{column}"),
        &format!("{}^^^^ at most 256", " ".repeat(column - 1)),
    );
    let source = many("VAR", &|i| format!("v{i}"), limits::MAX_VARIABLES + 1);
    let column = source.lines().nth(1).unwrap().find("v256").unwrap() + 1;
    check(
        &source,
        "too many variables",
        &format!("2:{column}"),
        &format!("{}^^^^ at most 256", " ".repeat(column - 1)),
    );
    let source = many("TRIGGERS", &|i| format!("{i}"), limits::MAX_TRIGGERS + 1);
    let column = source.lines().nth(1).unwrap().find(" 64;").unwrap() + 2;
    check(
        &source,
        "too many triggers",
        &format!("2:{column}"),
        &format!("{}^^ at most 64", " ".repeat(column - 1)),
    );
}

#[test]
fn trigger_blocks_must_match_the_triggers_list() {
    check(
        "PROGRAM p: TRIGGERS 5;\nMESSAGE 5: BEGIN END;\nMESSAGE 5: BEGIN END;\nEND.",
        "a second MESSAGE block for trigger 5",
        "3:9",
        "        ^ trigger already handled",
    );
    check(
        "PROGRAM p: TRIGGERS 5;\nMESSAGE 5: BEGIN END;\nMESSAGE 6: BEGIN END;\nEND.",
        "trigger 6 is not declared",
        "3:9",
        "        ^ not in the TRIGGERS list",
    );
    check(
        "PROGRAM p: TRIGGERS 5, 6;\nMESSAGE 5: BEGIN END;\nEND.",
        "trigger 6 has no MESSAGE block",
        "1:24",
        "                       ^ declared here",
    );
}

#[test]
fn statement_syntax() {
    check(
        &init("x = 1 x = 2"),
        "expected `;` between statements, found name `x`",
        "2:13",
        "            ^ `;` missing before this",
    );
    check(
        &init("x = 1; THEN"),
        "expected a statement here, found `THEN`",
        "2:14",
        "             ^^^^",
    );
    check(
        &init("x = 1; 5"),
        "expected a statement here, found number `5`",
        "2:14",
        "             ^",
    );
    check(
        &init("SEND 5 LEN 8 AS 1 TO p"),
        "expected a variable here, found number `5`",
        "2:12",
        "           ^",
    );
    check(
        &init("x 1"),
        "expected `=` to assign to `x`, found number `1`",
        "2:9",
        "        ^",
    );
    check(
        &init("IF x x = 1"),
        "expected `THEN` after the IF condition, found name `x`",
        "2:12",
        "           ^",
    );
    check(
        &init("WHILE x x = 1"),
        "expected `DO` after the WHILE condition, found name `x`",
        "2:15",
        "              ^",
    );
    check(
        "PROGRAM p: VAR x;\nBEGIN\n  x = 1;\n  BEGIN x = 2\nEND.",
        "expected `END` closing the block, found the end of the file",
        "5:5",
        "    ^ the block is still open here",
    );
    check(
        &init("SEND a 8 AS 1 TO p"),
        "expected `LEN` after the variable to send, found number `8`",
        "2:14",
        "             ^",
    );
    check(
        &init("SEND a LEN 8 1 TO p"),
        "expected `AS` after the length (`AS trigger`), found number `1`",
        "2:20",
        "                   ^",
    );
    check(
        &init("SEND a LEN 8 AS 1 p"),
        "expected `TO` after the trigger (`TO program`), found name `p`",
        "2:25",
        "                        ^",
    );
    check(
        &init("SEND a LEN 8 AS 1 TO p AT 0:0:0:96:221:127:255:140"),
        "a node is a rank of the job, not a network address",
        "2:33",
        "                                ^^^^^^^^^^^^^^^^^^^^^^^^ write the rank number: `AT 1`",
    );
    check(
        &handler("REPLY a 8 AS 1"),
        "expected `LEN` after the variable to reply with, found number `8`",
        "3:26",
        "                         ^",
    );
    check(
        &init("DELIVER a 0 INTO 1 LEN 8"),
        "expected `OFFSET` after the variable to deliver, found number `0`",
        "2:17",
        "                ^",
    );
    check(
        &init("DELIVER a OFFSET 0 1 LEN 8"),
        "expected `INTO` after the offset (`INTO segment`), found number `1`",
        "2:26",
        "                         ^",
    );
    check(
        &init("DELIVER a OFFSET 0 INTO 1 8"),
        "expected `LEN` after the segment, found number `8`",
        "2:33",
        "                                ^",
    );
    check(
        &init("GET a 1 OFFSET 0 LEN 8"),
        "expected `FROM` after the variable to fill, found number `1`",
        "2:13",
        "            ^",
    );
    check(
        &init("GET a FROM 1 0 LEN 8"),
        "expected `OFFSET` after the segment, found number `0`",
        "2:20",
        "                   ^",
    );
    check(
        &init("GET a FROM 1 OFFSET 0 8"),
        "expected `LEN` after the offset, found number `8`",
        "2:29",
        "                            ^",
    );
    check(
        &init("RECEIVE a 8"),
        "expected `LEN` after the variable to fill, found number `8`",
        "2:17",
        "                ^",
    );
    check(
        &init("a[1 := 2"),
        "expected `]` after the index, found `:=`",
        "2:11",
        "          ^^",
    );
}

#[test]
fn expression_syntax() {
    check(
        &init("x = (1 + 2"),
        "expected `)` closing the parenthesis, found `END`",
        "2:18",
        "                 ^^^",
    );
    check(
        &init("x = a[1 := 2"),
        "expected `]` after the index, found `:=`",
        "2:15",
        "              ^^",
    );
    check(
        &init("x = LOCKED 1"),
        "expected `(` after LOCKED, found number `1`",
        "2:18",
        "                 ^",
    );
    check(
        &init("x = LOCKED(1"),
        "expected `)` after the lock number, found `END`",
        "2:20",
        "                   ^^^",
    );
    check(
        &init("x = * 2"),
        "expected an expression here, found `*`",
        "2:11",
        "          ^",
    );
    check(
        &init("x = 1 < 2 < 3"),
        "comparisons cannot be chained",
        "2:17",
        "                ^ a second comparison",
    );
    check(
        &init("x = 9223372036854775808"),
        "integer literal out of range",
        "2:11",
        "          ^^^^^^^^^^^^^^^^^^^ larger than 2^63 - 1",
    );
    let long_sum = vec!["x"; limits::MAX_EXPR_DEPTH + 2].join("+");
    check(
        &init(&format!("x = {long_sum}")),
        "expression too deep",
        "2:11",
        &format!(
            "          {} more than 64 operators deep",
            "^".repeat(2 * 64 + 1)
        ),
    );
    let parens = format!(
        "{}1{}",
        "(".repeat(limits::MAX_NESTING + 1),
        ")".repeat(limits::MAX_NESTING + 1)
    );
    check(
        &init(&format!("x = {parens}")),
        "nesting too deep",
        "2:74",
        &format!("{}^ more than 64 levels", " ".repeat(73)),
    );
    let nested = format!("{}x = 1", "BEGIN ".repeat(limits::MAX_NESTING + 1));
    check(
        &init(&nested),
        "nesting too deep",
        "2:391",
        &format!("{}^^^^^ more than 64 levels", " ".repeat(390)),
    );
}

#[test]
fn names_and_values() {
    check(
        &init("x = y + 1"),
        "undeclared name `y`",
        "2:11",
        "          ^ not declared in any VAR or CONST section",
    );
    check(
        &init("c = 1"),
        "cannot assign to the constant `c`",
        "2:7",
        "      ^ declared in CONST",
    );
    check(
        &init("x = a"),
        "`a` is an array",
        "2:11",
        "          ^ an element is needed: `a[i]`",
    );
    check(
        &init("x = x[1]"),
        "`x` is not an array",
        "2:11",
        "          ^^^^ declared without a size, so it cannot be indexed",
    );
    check(
        &init("x[1] = 2"),
        "`x` is not an array",
        "2:7",
        "      ^^^^ declared without a size, so it cannot be indexed",
    );
    check(
        &init("x = c[1]"),
        "`c` is a constant, not an array",
        "2:11",
        "          ^ cannot be indexed",
    );
    check(
        &init("a[4] = 1"),
        "index 4 out of bounds",
        "2:9",
        "        ^ `a` has 4 elements: 0 to 3",
    );
    check(
        &init("x = a[-1]"),
        "index -1 out of bounds",
        "2:13",
        "            ^^ `a` has 4 elements: 0 to 3",
    );
    check(
        &init("x = x MOD 0"),
        "division by zero",
        "2:17",
        "                ^ the divisor is 0",
    );
    let deep = format!(
        "x = {}x{}",
        "x + (".repeat(limits::MAX_STACK_DEPTH as usize + 1),
        ")".repeat(limits::MAX_STACK_DEPTH as usize + 1)
    );
    let source = init(&deep);
    let errors = compile(&source).expect_err("too complex");
    let d = &errors[0];
    assert_eq!(d.message, "expression too complex");
    assert_eq!(
        d.label,
        "needs more than 32 words of operand stack here",
        "{}",
        render(d, &source)
    );
}

#[test]
fn transfers() {
    check(
        &init("SEND c LEN 8 AS 1 TO p"),
        "`c` is a constant",
        "2:12",
        "           ^ a variable is needed here: bytes are moved to or from it",
    );
    check(
        &init("SEND a LEN 5000 AS 1 TO p"),
        "length 5000 out of range",
        "2:18",
        "                 ^^^^ must be 0 to 4096 bytes",
    );
    check(
        &init("SEND a[1] LEN 32 AS 1 TO p"),
        "LEN 32 reaches past the end of `a`",
        "2:21",
        "                    ^^ from element 1 of `a` there are 24 bytes",
    );
    check(
        &init("SEND a LEN 8 AS 70000 TO p"),
        "trigger number 70000 out of range",
        "2:23",
        "                      ^^^^^ must be 0 to 65535",
    );
    check(
        &init("SEND a LEN 8 AS 1 TO -1"),
        "program id -1 out of range",
        "2:28",
        "                           ^^ must be 0 to 4294967295",
    );
    check(
        &init("SEND a LEN 8 AS 1 TO p AT -1"),
        "rank -1 out of range",
        "2:33",
        "                                ^^ must be 0 to 9223372036854775807",
    );
    check(
        &init("DELIVER a OFFSET 0 INTO 70000 LEN 8"),
        "segment id 70000 out of range",
        "2:31",
        "                              ^^^^^ must be 0 to 65535",
    );
    check(
        &init("GET a FROM 1 OFFSET -8 LEN 8"),
        "segment offset -8 out of range",
        "2:27",
        "                          ^^ must be 0 to 9223372036854775807",
    );
    check(
        &init("RECEIVE a OFFSET -8 LEN 8"),
        "message offset -8 out of range",
        "2:24",
        "                       ^^ must be 0 to 9223372036854775807",
    );
    check(
        &init("SETFLAG 64"),
        "flag number 64 out of range",
        "2:15",
        "              ^^ must be 0 to 63",
    );
    check(
        &init("CLEARLOCK 64"),
        "lock number 64 out of range",
        "2:17",
        "                ^^ must be 0 to 63",
    );
    check(
        &init("x = LOCKED(64)"),
        "lock number 64 out of range",
        "2:18",
        "                 ^^ must be 0 to 63",
    );
}

#[test]
fn statements_that_need_a_triggering_message() {
    for (statement, caret) in [
        ("DROP", "^^^^"),
        ("PASS", "^^^^"),
        ("REPLY a LEN 8 AS 1", "^^^^^"),
    ] {
        let keyword = statement.split(' ').next().unwrap();
        check(
            &init(statement),
            &format!("{keyword} in the initialisation block"),
            "2:7",
            &format!("      {caret} there is no triggering message here"),
        );
        // The same statement is fine in a trigger block.
        compile(&handler(statement)).expect("allowed in a MESSAGE block");
    }
}

#[test]
fn a_program_too_large_for_the_code_limit() {
    // `x = 1` is 14 bytes of code (PUSH, STORE): 4682 of them are 65548 bytes, and with the
    // AWAIT ending the init block and the 15 bytes of trigger 5, 65564.
    let body = "x = 1;".repeat(limits::MAX_CODE_BYTES as usize / 14 + 1);
    check(
        &init(&body),
        "program too large",
        "1:9",
        "        ^ 65564 bytes of code; at most 65536",
    );
}

#[test]
fn errors_are_in_source_order_bounded_and_all_reported() {
    let source = "PROGRAM p: VAR x;\nBEGIN\n  x = y;\n  z = 1;\n  x = w\nEND;\nEND.\n";
    let errors = compile(source).expect_err("three undeclared names");
    let at: Vec<(usize, usize)> = errors.iter().map(|d| d.line_col(source)).collect();
    assert_eq!(at, vec![(3, 7), (4, 3), (5, 7)]);

    let many = format!(
        "PROGRAM p:\nBEGIN\n{}END;\nEND.\n",
        "  q = 1;\n".repeat(200)
    );
    let errors = compile(&many).expect_err("undeclared everywhere");
    assert_eq!(errors.len(), limits::MAX_ERRORS);
    let text = render_all("many.pdl", &many, &errors);
    assert!(text.ends_with("error: could not compile `many.pdl` due to 50 errors\n"));
}
