//! The example programs in examples/pdl: each compiles, its module passes the verifier and
//! survives encoding, and figures 2 and 4 of the paper compile as printed, with only figure 2's
//! Myrinet node address replaced by a rank.

use std::path::PathBuf;

use nicmsg_pdl::{compile, disasm, verify, Module};

/// Figure 2 of the paper (the ping program), as printed (text as extracted from the paper).
const FIGURE_2: &str = r#"PROGRAM PING: # -- This program initiates, awaits reply from remote program.

VAR timesent[100], timerec[100], i, msg[1024]; # -- Variable declarations
TRIGGERS 10; # -- Trigger declarations

BEGIN # -- Program Initialization
i = 0;
timesent[i] = CLOCK;
SEND msg[0] LEN 64 AS 12 TO 415 AT 0:0:0:96:221:127:255:140;
AWAIT; # -- Wait for first message to come in

END;

MESSAGE 10: # -- Trigger block for trigger 10
BEGIN

timerec[i] = CLOCK; i = i + 1;
if i < 100 THEN BEGIN

Timesent[i] = CLOCK;
SEND msg[0] LEN 64 AS 12 TO 415 AT 0:0:0:96:221:127:255:140;
AWAIT; # -- Wait for the next trigger to arrive
# -- We never reach this point

END;
i = 0; # -- Reach here when i >= 100
# -- Send timestamp information to buffer for reading by host
WHILE i < 100 DO BEGIN

DISPLAY timesent[i]; DISPLAY timerec[i]; i = i + 1;
END;
STOP;

END; # -- End of Trigger block
END; # -- End of program
"#;

/// Figure 4 of the paper (DELIVER and trigger test program), as printed.
const FIGURE_4: &str = r#"PROGRAM delivertest: # DELIVER and trigger test program

VAR y, msg[50];
TRIGGERS 10;

BEGIN
msg[0] = 2;
msg[1] = 3;
msg[2] = 4;
AWAIT

END;

MESSAGE 10: BEGIN
DELIVER msg[0] OFFSET 0 INTO 2 LEN 64;
AWAIT

END;
END;
"#;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/pdl")
}

fn example(name: &str) -> String {
    std::fs::read_to_string(examples_dir().join(name)).expect("read the example")
}

fn build(source: &str) -> Module {
    let module = match compile(source) {
        Ok(module) => module,
        Err(errors) => panic!("{}", nicmsg_pdl::render_all("example", source, &errors)),
    };
    verify(&module).expect("the compiler's output passes the verifier");
    let bytes = module.encode().expect("encodes");
    assert_eq!(Module::decode(&bytes), Ok(module.clone()));
    module
}

#[test]
fn figure_2_compiles_unchanged_but_for_the_node_address() {
    let file = example("ping.pdl");
    assert_eq!(
        file,
        FIGURE_2.replace("AT 0:0:0:96:221:127:255:140", "AT 1")
    );
    let module = build(&file);
    assert_eq!(module.name, "ping");
    assert_eq!(module.data_len, (100 + 100 + 1 + 1024) * 8);
    assert_eq!(module.triggers.len(), 1);
    assert_eq!(module.triggers[0].trigger, 10);
    let listing = disasm(&module);
    // Timesent[i] is timesent[i]: one variable, written through a checked index.
    assert!(listing.contains("STOREX 0+800"), "{listing}");
    assert!(listing.contains("SEND 1608+8192"), "{listing}");
    assert!(listing.contains("STOP"), "{listing}");
    assert!(listing.contains("DISPLAY"), "{listing}");
}

#[test]
fn the_myrinet_address_of_figure_2_is_refused_with_a_hint() {
    let errors = compile(FIGURE_2).expect_err("Myrinet addresses are not ranks");
    assert_eq!(errors.len(), 2, "{errors:?}");
    for e in &errors {
        assert_eq!(
            e.message,
            "a node is a rank of the job, not a network address"
        );
    }
}

#[test]
fn figure_4_compiles_as_printed() {
    let file = example("delivertest.pdl");
    assert_eq!(file, FIGURE_4);
    let module = build(&file);
    assert_eq!(module.name, "delivertest");
    assert!(disasm(&module).contains("DELIVER 8+400"));
}

#[test]
fn every_example_compiles_and_verifies() {
    let mut names: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("examples/pdl")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pdl"))
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    for name in names {
        let module = build(&example(&name));
        assert_eq!(
            format!("{}.pdl", module.name),
            name,
            "file named after its program"
        );
    }
}

/// docs/pdl.md shows every example program as its file is, so the reference cannot go stale.
#[test]
fn the_language_reference_shows_every_example_as_it_is() {
    let doc_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/pdl.md");
    let doc = std::fs::read_to_string(doc_path).expect("docs/pdl.md");
    for entry in std::fs::read_dir(examples_dir()).expect("examples/pdl") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|x| x == "pdl") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("read");
            assert!(
                doc.contains(&format!("(`{name}`)\n"))
                    && doc.contains(&format!("```text\n{text}```")),
                "docs/pdl.md does not show {name} as it is"
            );
        }
    }
}
