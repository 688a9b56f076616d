//! The lexer: source text to tokens. Keywords and identifiers are case-insensitive (figure 2 of
//! the paper writes `Timesent` for `timesent` and `if` for `IF`), so names are lower-cased here
//! once and compared as they are everywhere after. `#` starts a comment to the end of the line.
//!
//! Errors (a stray character, a literal too large, a name too long) are reported and lexing goes
//! on, so one run reports them all.

use crate::diag::{Diagnostic, Span};
use crate::limits::MAX_NAME_LEN;

/// A keyword. Every keyword is reserved: it cannot name a variable, constant or program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyword {
    Program,
    Var,
    Const,
    Triggers,
    Begin,
    End,
    Message,
    If,
    Then,
    Else,
    While,
    Do,
    Send,
    Len,
    As,
    To,
    At,
    Await,
    Stop,
    Clock,
    Display,
    Deliver,
    Offset,
    Into,
    Get,
    From,
    And,
    Or,
    Not,
    Mod,
    ClearLock,
    SetFlag,
    Locked,
    MsgLen,
    MsgSrc,
    Rank,
    NRanks,
    Receive,
    Reply,
    Drop,
    Pass,
}

impl Keyword {
    const ALL: [(&'static str, Keyword); 41] = [
        ("program", Keyword::Program),
        ("var", Keyword::Var),
        ("const", Keyword::Const),
        ("triggers", Keyword::Triggers),
        ("begin", Keyword::Begin),
        ("end", Keyword::End),
        ("message", Keyword::Message),
        ("if", Keyword::If),
        ("then", Keyword::Then),
        ("else", Keyword::Else),
        ("while", Keyword::While),
        ("do", Keyword::Do),
        ("send", Keyword::Send),
        ("len", Keyword::Len),
        ("as", Keyword::As),
        ("to", Keyword::To),
        ("at", Keyword::At),
        ("await", Keyword::Await),
        ("stop", Keyword::Stop),
        ("clock", Keyword::Clock),
        ("display", Keyword::Display),
        ("deliver", Keyword::Deliver),
        ("offset", Keyword::Offset),
        ("into", Keyword::Into),
        ("get", Keyword::Get),
        ("from", Keyword::From),
        ("and", Keyword::And),
        ("or", Keyword::Or),
        ("not", Keyword::Not),
        ("mod", Keyword::Mod),
        ("clearlock", Keyword::ClearLock),
        ("setflag", Keyword::SetFlag),
        ("locked", Keyword::Locked),
        ("msglen", Keyword::MsgLen),
        ("msgsrc", Keyword::MsgSrc),
        ("rank", Keyword::Rank),
        ("nranks", Keyword::NRanks),
        ("receive", Keyword::Receive),
        ("reply", Keyword::Reply),
        ("drop", Keyword::Drop),
        ("pass", Keyword::Pass),
    ];

    /// The keyword spelt `lower` (already lower-case), if it is one.
    pub fn from_lower(lower: &str) -> Option<Keyword> {
        Self::ALL
            .iter()
            .find(|(text, _)| *text == lower)
            .map(|(_, k)| *k)
    }

    /// How the reference writes it.
    pub fn text(self) -> &'static str {
        // ALL holds every variant, so the search always succeeds; "?" keeps this total.
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(text, _)| text)
    }
}

/// What a token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// A name, lower-cased.
    Ident(String),
    /// A literal; up to 2^63 so that `-9223372036854775808` can be written (the parser checks).
    Int(u64),
    Kw(Keyword),
    Colon,
    Semi,
    Comma,
    Dot,
    LBracket,
    RBracket,
    LParen,
    RParen,
    /// `:=`, accepted for assignment beside `=`.
    Assign,
    /// `=`: assignment in a statement, equality in an expression.
    Eq,
    /// `==`, equality.
    EqEq,
    /// `<>` or `!=`.
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Eof,
}

impl Tok {
    /// How the token is named in an error message ("expected `;`, found `END`").
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(name) => format!("name `{name}`"),
            Tok::Int(n) => format!("number `{n}`"),
            Tok::Kw(k) => format!("`{}`", k.text().to_uppercase()),
            Tok::Eof => "the end of the file".to_string(),
            other => format!("`{}`", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Tok::Colon => ":",
            Tok::Semi => ";",
            Tok::Comma => ",",
            Tok::Dot => ".",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Assign => ":=",
            Tok::Eq => "=",
            Tok::EqEq => "==",
            Tok::Ne => "<>",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Ident(_) | Tok::Int(_) | Tok::Kw(_) | Tok::Eof => "",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// The tokens of `source`, ending with [`Tok::Eof`], and the errors met on the way.
pub fn lex(source: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lexer = Lexer {
        source,
        bytes: source.as_bytes(),
        pos: 0,
        tokens: Vec::new(),
        errors: Vec::new(),
    };
    lexer.run();
    let end = Span::new(source.len(), source.len());
    lexer.tokens.push(Token {
        tok: Tok::Eof,
        span: end,
    });
    (lexer.tokens, lexer.errors)
}

struct Lexer<'a> {
    source: &'a str,
    bytes: &'a [u8],
    pos: usize,
    tokens: Vec<Token>,
    errors: Vec<Diagnostic>,
}

impl Lexer<'_> {
    fn run(&mut self) {
        while let Some(&byte) = self.bytes.get(self.pos) {
            let start = self.pos;
            match byte {
                b' ' | b'\t' | b'\r' | b'\n' => self.pos += 1,
                b'#' => self.skip_comment(),
                b'0'..=b'9' => self.number(start),
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => self.name(start),
                _ => self.punctuation(start),
            }
        }
    }

    fn skip_comment(&mut self) {
        while self.bytes.get(self.pos).is_some_and(|&b| b != b'\n') {
            self.pos += 1;
        }
    }

    fn push(&mut self, tok: Tok, start: usize) {
        self.tokens.push(Token {
            tok,
            span: Span::new(start, self.pos),
        });
    }

    fn take_while(&mut self, keep: impl Fn(u8) -> bool) {
        while self.bytes.get(self.pos).is_some_and(|&b| keep(b)) {
            self.pos += 1;
        }
    }

    /// A decimal literal, or hexadecimal with `0x`. A letter right after the digits belongs to
    /// the literal (`12ab` is one bad literal, not a number and a name).
    fn number(&mut self, start: usize) {
        let hex =
            self.bytes[start] == b'0' && matches!(self.bytes.get(start + 1), Some(b'x' | b'X'));
        let digits_start = if hex { start + 2 } else { start };
        self.pos = digits_start;
        self.take_while(|b| b.is_ascii_alphanumeric() || b == b'_');
        let text = &self.source[digits_start..self.pos];
        let digit = |b: u8| {
            if hex {
                b.is_ascii_hexdigit()
            } else {
                b.is_ascii_digit()
            }
        };
        let value = if text.is_empty() || !text.bytes().all(digit) {
            let what = if hex { "hexadecimal" } else { "decimal" };
            self.error(
                start,
                "invalid integer literal",
                &format!("not a {what} number"),
            );
            0
        } else {
            match u64::from_str_radix(text, if hex { 16 } else { 10 }) {
                Ok(v) if v <= 1 << 63 => v,
                _ => {
                    self.error(
                        start,
                        "integer literal out of range",
                        "larger than 2^63 - 1",
                    );
                    0
                }
            }
        };
        self.push(Tok::Int(value), start);
    }

    fn name(&mut self, start: usize) {
        self.take_while(|b| b.is_ascii_alphanumeric() || b == b'_');
        let lower = self.source[start..self.pos].to_ascii_lowercase();
        if let Some(keyword) = Keyword::from_lower(&lower) {
            self.push(Tok::Kw(keyword), start);
            return;
        }
        if lower.len() > MAX_NAME_LEN {
            self.error(
                start,
                "name too long",
                &format!("{} characters; at most {MAX_NAME_LEN}", lower.len()),
            );
        }
        self.push(Tok::Ident(lower), start);
    }

    fn punctuation(&mut self, start: usize) {
        let next = self.bytes.get(start + 1).copied();
        let (tok, len) = match (self.bytes[start], next) {
            (b':', Some(b'=')) => (Tok::Assign, 2),
            (b'=', Some(b'=')) => (Tok::EqEq, 2),
            (b'<', Some(b'>')) | (b'!', Some(b'=')) => (Tok::Ne, 2),
            (b'<', Some(b'=')) => (Tok::Le, 2),
            (b'>', Some(b'=')) => (Tok::Ge, 2),
            (b':', _) => (Tok::Colon, 1),
            (b';', _) => (Tok::Semi, 1),
            (b',', _) => (Tok::Comma, 1),
            (b'.', _) => (Tok::Dot, 1),
            (b'[', _) => (Tok::LBracket, 1),
            (b']', _) => (Tok::RBracket, 1),
            (b'(', _) => (Tok::LParen, 1),
            (b')', _) => (Tok::RParen, 1),
            (b'=', _) => (Tok::Eq, 1),
            (b'<', _) => (Tok::Lt, 1),
            (b'>', _) => (Tok::Gt, 1),
            (b'+', _) => (Tok::Plus, 1),
            (b'-', _) => (Tok::Minus, 1),
            (b'*', _) => (Tok::Star, 1),
            (b'/', _) => (Tok::Slash, 1),
            _ => return self.stray(start),
        };
        self.pos = start + len;
        self.push(tok, start);
    }

    /// A character that starts no token: reported, then skipped whole (it may be several bytes).
    fn stray(&mut self, start: usize) {
        let c = self.source[start..].chars().next().unwrap_or('\u{fffd}');
        self.pos = start + c.len_utf8();
        let shown = if c.is_control() {
            format!("{:?}", c)
        } else {
            format!("`{c}`")
        };
        self.errors.push(
            Diagnostic::error(
                Span::new(start, self.pos),
                format!("unexpected character {shown}"),
            )
            .label("not part of PDL"),
        );
    }

    fn error(&mut self, start: usize, message: &str, label: &str) {
        self.errors
            .push(Diagnostic::error(Span::new(start, self.pos), message).label(label));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(source: &str) -> Vec<Tok> {
        let (tokens, errors) = lex(source);
        assert!(errors.is_empty(), "{errors:?}");
        tokens.into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn keywords_and_names_are_case_insensitive_and_comments_are_skipped() {
        assert_eq!(
            toks("If Timesent[i] <> 0x1F THEN # comment\n := == != <= >="),
            vec![
                Tok::Kw(Keyword::If),
                Tok::Ident("timesent".into()),
                Tok::LBracket,
                Tok::Ident("i".into()),
                Tok::RBracket,
                Tok::Ne,
                Tok::Int(31),
                Tok::Kw(Keyword::Then),
                Tok::Assign,
                Tok::EqEq,
                Tok::Ne,
                Tok::Le,
                Tok::Ge,
                Tok::Eof
            ]
        );
    }

    #[test]
    fn every_keyword_has_its_text() {
        for (text, keyword) in Keyword::ALL {
            assert_eq!(keyword.text(), text);
            assert_eq!(Keyword::from_lower(text), Some(keyword));
        }
    }
}
