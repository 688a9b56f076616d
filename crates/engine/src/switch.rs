//! The words an on/off `NICMSG_*` setting accepts, in any case: one list for every crate that
//! reads such a setting (the library's options, and an LM socket's `NICMSG_STATS`).

/// Words that turn a switch on.
pub const ON: [&str; 4] = ["1", "true", "yes", "on"];
/// Words that turn a switch off.
pub const OFF: [&str; 4] = ["0", "false", "no", "off"];

/// The state `text` (trimmed) sets, if it is one of the words.
pub fn parse(text: &str) -> Option<bool> {
    let text = text.trim();
    let among = |words: &[&str]| words.iter().any(|word| word.eq_ignore_ascii_case(text));
    if among(&ON) {
        Some(true)
    } else if among(&OFF) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_in_any_case_and_nothing_else() {
        for word in ON {
            assert_eq!(parse(word), Some(true));
            assert_eq!(parse(&format!(" {} ", word.to_uppercase())), Some(true));
        }
        for word in OFF {
            assert_eq!(parse(word), Some(false));
        }
        for other in ["", "2", "onn", "y"] {
            assert_eq!(parse(other), None, "{other:?}");
        }
    }
}
