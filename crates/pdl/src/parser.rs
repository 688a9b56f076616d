//! The parser: tokens to a [`Program`], by recursive descent.
//!
//! Separators are as tolerant as the paper's listings: `;` separates statements and may be left
//! out before `END` (figure 4 writes `AWAIT` then `END`), empty statements are allowed, `END;`
//! and `END` both close a block, `;` before `ELSE` is accepted, and the `;` after a declaration
//! list may be left out before the next section.
//!
//! On an error the parser reports it and skips to the next statement (`;` or `END`) or
//! declaration, so one run reports every syntax error it can. Recursion is bounded by
//! [`MAX_NESTING`] and expression trees by [`MAX_EXPR_DEPTH`], so no input overflows the stack.

use crate::ast::*;
use crate::diag::{line_col, Diagnostic, Span};
use crate::lexer::{Keyword, Tok, Token};
use crate::limits::{MAX_ERRORS, MAX_EXPR_DEPTH, MAX_NESTING};

/// Parses a whole program. The program is `None` only when not even its header could be read;
/// otherwise it holds everything that parsed, and the errors say what did not.
pub fn parse(source: &str, tokens: Vec<Token>) -> (Option<Program>, Vec<Diagnostic>) {
    let mut parser = Parser {
        source,
        tokens,
        pos: 0,
        errors: Vec::new(),
        nesting: 0,
    };
    if parser.tokens.last().map(|t| &t.tok) != Some(&Tok::Eof) {
        // The lexer always ends with Eof; keep `peek` total for any caller anyway.
        parser.tokens.push(Token {
            tok: Tok::Eof,
            span: Span::default(),
        });
    }
    let program = parser.program().ok();
    (program, parser.errors)
}

/// The error is already recorded; the caller recovers.
struct Failed;

type PResult<T> = Result<T, Failed>;

struct Parser<'a> {
    source: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    errors: Vec<Diagnostic>,
    nesting: usize,
}

/// Keywords that open a section of the program: a declaration list stops before them.
fn starts_section(tok: &Tok) -> bool {
    matches!(
        tok,
        Tok::Kw(Keyword::Var | Keyword::Const | Keyword::Triggers | Keyword::Begin)
            | Tok::Kw(Keyword::Message | Keyword::End)
            | Tok::Eof
    )
}

/// Tokens that can start a statement: after a statement missing its `;`, parsing goes on at
/// such a token instead of skipping it.
fn starts_statement(tok: &Tok) -> bool {
    use Keyword::*;
    match tok {
        Tok::Ident(_) => true,
        Tok::Kw(k) => matches!(
            k,
            Begin
                | If
                | While
                | Send
                | Reply
                | Deliver
                | Get
                | Receive
                | Display
                | ClearLock
                | SetFlag
                | Await
                | Stop
                | Drop
                | Pass
        ),
        _ => false,
    }
}

impl Parser<'_> {
    // ---- tokens ----

    fn peek(&self) -> &Tok {
        &self.tokens[self.pos].tok
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        let last = self.tokens.len() - 1;
        &self.tokens[(self.pos + ahead).min(last)].tok
    }

    fn span(&self) -> Span {
        self.tokens[self.pos].span
    }

    fn bump(&mut self) -> Token {
        let token = self.tokens[self.pos].clone();
        // Never past Eof, the last token.
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        token
    }

    fn at_kw(&self, keyword: Keyword) -> bool {
        *self.peek() == Tok::Kw(keyword)
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        let found = self.peek() == tok;
        if found {
            self.bump();
        }
        found
    }

    fn eat_kw(&mut self, keyword: Keyword) -> bool {
        self.eat(&Tok::Kw(keyword))
    }

    fn error(&mut self, diagnostic: Diagnostic) -> Failed {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(diagnostic);
        }
        Failed
    }

    /// "expected `what` `context`, found X" at the current token.
    fn expected(&mut self, what: &str, context: &str) -> Failed {
        let found = self.peek().describe();
        let span = self.span();
        self.error(Diagnostic::error(
            span,
            format!("expected {what} {context}, found {found}"),
        ))
    }

    fn expect(&mut self, tok: Tok, context: &str) -> PResult<Span> {
        if self.peek() == &tok {
            Ok(self.bump().span)
        } else {
            Err(self.expected(&tok.describe(), context))
        }
    }

    fn expect_kw(&mut self, keyword: Keyword, context: &str) -> PResult<Span> {
        self.expect(Tok::Kw(keyword), context)
    }

    fn ident(&mut self, what: &str) -> PResult<Ident> {
        match self.peek().clone() {
            Tok::Ident(name) => {
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            Tok::Kw(k) => {
                let span = self.span();
                Err(self.error(
                    Diagnostic::error(
                        span,
                        format!("expected {what}, found the keyword `{}`", k.text().to_uppercase()),
                    )
                    .label("keywords are reserved")
                    .note("keywords are reserved in any case: `Len`, `len` and `LEN` are all the keyword"),
                ))
            }
            _ => Err(self.expected(what, "here")),
        }
    }

    /// Counts one level of nesting; every `enter` that succeeds is paired with a `leave`.
    fn enter(&mut self) -> PResult<()> {
        if self.nesting >= MAX_NESTING {
            let span = self.span();
            return Err(self.error(
                Diagnostic::error(span, "nesting too deep")
                    .label(format!("more than {MAX_NESTING} levels"))
                    .note("split the expression or the statement using variables"),
            ));
        }
        self.nesting += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    /// Runs `parse` one nesting level deeper.
    fn nested<T>(&mut self, parse: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        self.enter()?;
        let result = parse(self);
        self.leave();
        result
    }

    // ---- program and declarations ----

    fn program(&mut self) -> PResult<Program> {
        self.expect_kw(Keyword::Program, "at the start of the program")?;
        let name = self.ident("the program's name")?;
        if !self.eat(&Tok::Colon) && !self.eat(&Tok::Semi) {
            self.expected("`:`", "after the program's name");
        }
        let decls = self.declarations();
        let init = if self.at_kw(Keyword::Begin) {
            let block = self.block().ok();
            self.eat(&Tok::Semi);
            block
        } else {
            None
        };
        let mut handlers = Vec::new();
        while self.at_kw(Keyword::Message) {
            match self.handler() {
                Ok(handler) => handlers.push(handler),
                Err(Failed) => self.skip_to_handler(),
            }
            self.eat(&Tok::Semi);
        }
        self.program_end();
        Ok(Program {
            name,
            decls,
            init,
            handlers,
        })
    }

    /// The final `END` (with `;` or `.` after it, or nothing), then the end of the file.
    fn program_end(&mut self) {
        if self.eat_kw(Keyword::End) {
            if !self.eat(&Tok::Semi) {
                self.eat(&Tok::Dot);
            }
        } else if *self.peek() != Tok::Eof || self.errors.is_empty() {
            // At the end of a file after other errors the END was most likely skipped in
            // recovery: saying it is missing would only repeat them.
            self.expected("`MESSAGE` or `END`", "closing the program");
            return;
        }
        if *self.peek() != Tok::Eof {
            let span = self.span();
            let found = self.peek().describe();
            self.error(
                Diagnostic::error(
                    span,
                    format!("unexpected {found} after the end of the program"),
                )
                .label("the program ended with the END before this"),
            );
        }
    }

    fn declarations(&mut self) -> Vec<Decl> {
        let mut decls = Vec::new();
        loop {
            let item: fn(&mut Self) -> PResult<Decl> = match self.peek() {
                Tok::Kw(Keyword::Var) => Self::var_decl,
                Tok::Kw(Keyword::Const) => Self::const_decl,
                Tok::Kw(Keyword::Triggers) => |p: &mut Self| Ok(Decl::Trigger(p.expr()?)),
                _ => return decls,
            };
            let section = self.bump();
            self.decl_list(item, &section, &mut decls);
        }
    }

    /// `item {, item} [;]`; the `;` may be left out before the next section.
    fn decl_list(
        &mut self,
        item: fn(&mut Self) -> PResult<Decl>,
        section: &Token,
        decls: &mut Vec<Decl>,
    ) {
        let context = format!("in the {} list", section.tok.describe());
        loop {
            match item(self) {
                Ok(decl) => decls.push(decl),
                Err(Failed) => return self.skip_declaration(),
            }
            if self.eat(&Tok::Comma) {
                continue;
            }
            if self.eat(&Tok::Semi) || starts_section(self.peek()) {
                return;
            }
            self.expected("`,` or `;`", &context);
            return self.skip_declaration();
        }
    }

    fn var_decl(&mut self) -> PResult<Decl> {
        let name = self.ident("a variable name")?;
        let size = if self.eat(&Tok::LBracket) {
            let size = self.expr()?;
            self.expect(Tok::RBracket, "after the array size")?;
            Some(size)
        } else {
            None
        };
        Ok(Decl::Var { name, size })
    }

    fn const_decl(&mut self) -> PResult<Decl> {
        let name = self.ident("a constant name")?;
        if !self.eat(&Tok::Eq) && !self.eat(&Tok::Assign) {
            return Err(self.expected("`=`", "after the constant's name"));
        }
        let value = self.expr()?;
        Ok(Decl::Const { name, value })
    }

    fn skip_declaration(&mut self) {
        while !starts_section(self.peek()) {
            if self.bump().tok == Tok::Semi {
                return;
            }
        }
    }

    fn handler(&mut self) -> PResult<Handler> {
        self.bump(); // MESSAGE
        let trigger = self.expr()?;
        self.expect(Tok::Colon, "after the trigger number")?;
        let block = self.block()?;
        Ok(Handler { trigger, block })
    }

    /// After a trigger block that could not be read: on to the next `MESSAGE` or the end.
    fn skip_to_handler(&mut self) {
        while !matches!(self.peek(), Tok::Kw(Keyword::Message) | Tok::Eof) {
            self.bump();
        }
    }

    // ---- statements ----

    /// `BEGIN {statement ;} END`. A missing `END` is reported and the block kept.
    fn block(&mut self) -> PResult<Block> {
        let span = self.expect_kw(Keyword::Begin, "to open a block")?;
        let stmts = self.statements();
        if !self.eat_kw(Keyword::End) {
            let found = self.peek().describe();
            let (line, col) = line_col(self.source, span.start as usize);
            let here = self.span();
            self.error(
                Diagnostic::error(
                    here,
                    format!("expected `END` closing the block, found {found}"),
                )
                .label("the block is still open here")
                .note(format!("the block opened with the BEGIN at {line}:{col}")),
            );
        }
        Ok(Block { stmts, span })
    }

    fn statements(&mut self) -> Vec<Stmt> {
        let mut stmts = Vec::new();
        loop {
            while self.eat(&Tok::Semi) {}
            if matches!(
                self.peek(),
                Tok::Kw(Keyword::End | Keyword::Message) | Tok::Eof
            ) {
                return stmts;
            }
            let start = self.pos;
            match self.stmt() {
                Ok(stmt) => stmts.push(stmt),
                Err(Failed) => {
                    self.skip_statement(start);
                    continue;
                }
            }
            if self.eat(&Tok::Semi) || matches!(self.peek(), Tok::Kw(Keyword::End) | Tok::Eof) {
                continue;
            }
            let span = self.span();
            let found = self.peek().describe();
            self.error(
                Diagnostic::error(
                    span,
                    format!("expected `;` between statements, found {found}"),
                )
                .label("`;` missing before this"),
            );
            if !starts_statement(self.peek()) {
                let here = self.pos;
                self.skip_statement(here);
            }
        }
    }

    /// Recovery: skips past the next `;` of this block, or to its `END` (left for the block).
    fn skip_statement(&mut self, start: usize) {
        if self.pos == start && !matches!(self.peek(), Tok::Kw(Keyword::End) | Tok::Eof) {
            self.bump();
        }
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Tok::Eof => return,
                Tok::Semi if depth == 0 => {
                    self.bump();
                    return;
                }
                Tok::Kw(Keyword::Message) if depth == 0 => return,
                Tok::Kw(Keyword::End) if depth == 0 => return,
                Tok::Kw(Keyword::End) => depth -= 1,
                Tok::Kw(Keyword::Begin) => depth += 1,
                _ => {}
            }
            self.bump();
        }
    }

    fn stmt(&mut self) -> PResult<Stmt> {
        self.nested(Self::stmt_inner)
    }

    fn stmt_inner(&mut self) -> PResult<Stmt> {
        use Keyword::*;
        let span = self.span();
        let keyword = match self.peek() {
            Tok::Ident(_) => {
                let kind = self.assignment()?;
                return Ok(Stmt { kind, span });
            }
            Tok::Kw(k) => *k,
            _ => return Err(self.expected("a statement", "here")),
        };
        let kind = match keyword {
            Begin => StmtKind::Block(self.block()?),
            If => self.if_stmt()?,
            While => self.while_stmt()?,
            Send => self.send()?,
            Reply => self.reply()?,
            Deliver => self.deliver()?,
            Get => self.get()?,
            Receive => self.receive()?,
            Display | ClearLock | SetFlag => {
                self.bump();
                let operand = self.expr()?;
                match keyword {
                    Display => StmtKind::Display(operand),
                    ClearLock => StmtKind::ClearLock(operand),
                    _ => StmtKind::SetFlag(operand),
                }
            }
            Await | Stop | Drop | Pass => {
                self.bump();
                match keyword {
                    Await => StmtKind::Await,
                    Stop => StmtKind::Stop,
                    Drop => StmtKind::Drop,
                    _ => StmtKind::Pass,
                }
            }
            _ => return Err(self.expected("a statement", "here")),
        };
        Ok(Stmt { kind, span })
    }

    fn assignment(&mut self) -> PResult<StmtKind> {
        let place = self.place()?;
        if !self.eat(&Tok::Eq) && !self.eat(&Tok::Assign) {
            return Err(self.expected("`=`", &format!("to assign to `{}`", place.name.name)));
        }
        let value = self.expr()?;
        Ok(StmtKind::Assign { place, value })
    }

    fn if_stmt(&mut self) -> PResult<StmtKind> {
        self.bump();
        let cond = self.expr()?;
        self.expect_kw(Keyword::Then, "after the IF condition")?;
        let then = Box::new(self.stmt()?);
        // Tolerated: `IF c THEN x = 1; ELSE x = 2`.
        if *self.peek() == Tok::Semi && *self.peek_at(1) == Tok::Kw(Keyword::Else) {
            self.bump();
        }
        let otherwise = if self.eat_kw(Keyword::Else) {
            Some(Box::new(self.stmt()?))
        } else {
            None
        };
        Ok(StmtKind::If {
            cond,
            then,
            otherwise,
        })
    }

    fn while_stmt(&mut self) -> PResult<StmtKind> {
        self.bump();
        let cond = self.expr()?;
        self.expect_kw(Keyword::Do, "after the WHILE condition")?;
        let body = Box::new(self.stmt()?);
        Ok(StmtKind::While { cond, body })
    }

    /// `SEND buf LEN len AS trigger TO program [AT node]`.
    fn send(&mut self) -> PResult<StmtKind> {
        self.bump();
        let buf = self.place()?;
        self.expect_kw(Keyword::Len, "after the variable to send")?;
        let len = self.expr()?;
        self.expect_kw(Keyword::As, "after the length (`AS trigger`)")?;
        let trigger = self.expr()?;
        self.expect_kw(Keyword::To, "after the trigger (`TO program`)")?;
        let program = self.expr()?;
        let node = if self.eat_kw(Keyword::At) {
            Some(self.node()?)
        } else {
            None
        };
        Ok(StmtKind::Send {
            buf,
            len,
            trigger,
            program,
            node,
        })
    }

    /// The rank after `AT`. The paper's Myrinet addresses (`0:0:0:96:221:127:255:140`) are
    /// refused with a hint rather than a bare syntax error.
    fn node(&mut self) -> PResult<Expr> {
        let node = self.expr()?;
        if *self.peek() != Tok::Colon {
            return Ok(node);
        }
        let mut span = node.span;
        while self.eat(&Tok::Colon) {
            if let Tok::Int(_) = self.peek() {
                span = span.to(self.bump().span);
            }
        }
        Err(self.error(
            Diagnostic::error(span, "a node is a rank of the job, not a network address")
                .label("write the rank number: `AT 1`")
                .note("ranks are numbered from 0 to NRANKS - 1"),
        ))
    }

    fn reply(&mut self) -> PResult<StmtKind> {
        self.bump();
        let buf = self.place()?;
        self.expect_kw(Keyword::Len, "after the variable to reply with")?;
        let len = self.expr()?;
        self.expect_kw(Keyword::As, "after the length (`AS trigger`)")?;
        let trigger = self.expr()?;
        Ok(StmtKind::Reply { buf, len, trigger })
    }

    fn deliver(&mut self) -> PResult<StmtKind> {
        self.bump();
        let buf = self.place()?;
        self.expect_kw(Keyword::Offset, "after the variable to deliver")?;
        let offset = self.expr()?;
        self.expect_kw(Keyword::Into, "after the offset (`INTO segment`)")?;
        let segment = self.expr()?;
        self.expect_kw(Keyword::Len, "after the segment")?;
        let len = self.expr()?;
        Ok(StmtKind::Deliver {
            buf,
            offset,
            segment,
            len,
        })
    }

    fn get(&mut self) -> PResult<StmtKind> {
        self.bump();
        let buf = self.place()?;
        self.expect_kw(Keyword::From, "after the variable to fill")?;
        let segment = self.expr()?;
        self.expect_kw(Keyword::Offset, "after the segment")?;
        let offset = self.expr()?;
        self.expect_kw(Keyword::Len, "after the offset")?;
        let len = self.expr()?;
        Ok(StmtKind::Get {
            buf,
            segment,
            offset,
            len,
        })
    }

    fn receive(&mut self) -> PResult<StmtKind> {
        self.bump();
        let buf = self.place()?;
        let offset = if self.eat_kw(Keyword::Offset) {
            Some(self.expr()?)
        } else {
            None
        };
        self.expect_kw(Keyword::Len, "after the variable to fill")?;
        let len = self.expr()?;
        Ok(StmtKind::Receive { buf, offset, len })
    }

    /// `name` or `name[index]`.
    fn place(&mut self) -> PResult<Place> {
        let name = self.ident("a variable")?;
        let mut span = name.span;
        let index = if self.eat(&Tok::LBracket) {
            let index = self.expr()?;
            span = span.to(self.expect(Tok::RBracket, "after the index")?);
            Some(index)
        } else {
            None
        };
        Ok(Place { name, index, span })
    }

    // ---- expressions, from the loosest binding to the tightest ----

    pub(crate) fn expr(&mut self) -> PResult<Expr> {
        self.nested(Self::or_expr)
    }

    fn or_expr(&mut self) -> PResult<Expr> {
        let mut lhs = self.and_expr()?;
        while self.eat_kw(Keyword::Or) {
            let rhs = self.and_expr()?;
            lhs = self.binary(BinOp::Or, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn and_expr(&mut self) -> PResult<Expr> {
        let mut lhs = self.not_expr()?;
        while self.eat_kw(Keyword::And) {
            let rhs = self.not_expr()?;
            lhs = self.binary(BinOp::And, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn not_expr(&mut self) -> PResult<Expr> {
        if !self.at_kw(Keyword::Not) {
            return self.cmp_expr();
        }
        let span = self.bump().span;
        let operand = self.nested(Self::not_expr)?;
        self.unary(span, operand, ExprKind::Not)
    }

    fn cmp_expr(&mut self) -> PResult<Expr> {
        let lhs = self.add_expr()?;
        let Some(op) = comparison(self.peek()) else {
            return Ok(lhs);
        };
        self.bump();
        let rhs = self.add_expr()?;
        let expr = self.binary(op, lhs, rhs)?;
        if comparison(self.peek()).is_some() {
            let span = self.span();
            return Err(self.error(
                Diagnostic::error(span, "comparisons cannot be chained")
                    .label("a second comparison")
                    .note("write `a < b AND b < c`"),
            ));
        }
        Ok(expr)
    }

    fn add_expr(&mut self) -> PResult<Expr> {
        let mut lhs = self.mul_expr()?;
        loop {
            let op = match self.peek() {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.mul_expr()?;
            lhs = self.binary(op, lhs, rhs)?;
        }
    }

    fn mul_expr(&mut self) -> PResult<Expr> {
        let mut lhs = self.unary_expr()?;
        loop {
            let op = match self.peek() {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                Tok::Kw(Keyword::Mod) => BinOp::Mod,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.unary_expr()?;
            lhs = self.binary(op, lhs, rhs)?;
        }
    }

    fn unary_expr(&mut self) -> PResult<Expr> {
        match self.peek() {
            Tok::Minus => {
                let span = self.bump().span;
                // -9223372036854775808 is the one literal that only exists negated.
                if *self.peek() == Tok::Int(1 << 63) {
                    let literal = self.bump().span;
                    return Ok(leaf(ExprKind::Int(i64::MIN), span.to(literal)));
                }
                let operand = self.nested(Self::unary_expr)?;
                self.unary(span, operand, ExprKind::Neg)
            }
            Tok::Plus => {
                self.bump();
                self.nested(Self::unary_expr)
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> PResult<Expr> {
        let span = self.span();
        let kind = match self.peek().clone() {
            Tok::Int(value) => {
                self.bump();
                match i64::try_from(value) {
                    Ok(v) => ExprKind::Int(v),
                    Err(_) => {
                        return Err(self.error(
                            Diagnostic::error(span, "integer literal out of range")
                                .label("larger than 2^63 - 1"),
                        ))
                    }
                }
            }
            Tok::Ident(name) => {
                self.bump();
                let name = Ident { name, span };
                if !self.eat(&Tok::LBracket) {
                    return Ok(leaf(ExprKind::Name(name), span));
                }
                let index = self.expr()?;
                let close = self.expect(Tok::RBracket, "after the index")?;
                return self.node_over(ExprKind::Index(name, Box::new(index)), span.to(close));
            }
            Tok::LParen => {
                self.bump();
                let mut inner = self.expr()?;
                let close = self.expect(Tok::RParen, "closing the parenthesis")?;
                inner.span = span.to(close);
                return Ok(inner);
            }
            Tok::Kw(Keyword::Locked) => {
                self.bump();
                self.expect(Tok::LParen, "after LOCKED")?;
                let lock = self.expr()?;
                let close = self.expect(Tok::RParen, "after the lock number")?;
                return self.node_over(ExprKind::Locked(Box::new(lock)), span.to(close));
            }
            Tok::Kw(Keyword::Clock) => self.leaf_kind(ExprKind::Clock),
            Tok::Kw(Keyword::MsgLen) => self.leaf_kind(ExprKind::MsgLen),
            Tok::Kw(Keyword::MsgSrc) => self.leaf_kind(ExprKind::MsgSrc),
            Tok::Kw(Keyword::Rank) => self.leaf_kind(ExprKind::Rank),
            Tok::Kw(Keyword::NRanks) => self.leaf_kind(ExprKind::NRanks),
            _ => return Err(self.expected("an expression", "here")),
        };
        Ok(leaf(kind, span))
    }

    fn leaf_kind(&mut self, kind: ExprKind) -> ExprKind {
        self.bump();
        kind
    }

    fn unary(&mut self, op: Span, operand: Expr, make: fn(Box<Expr>) -> ExprKind) -> PResult<Expr> {
        let span = op.to(operand.span);
        self.node_over(make(Box::new(operand)), span)
    }

    fn binary(&mut self, op: BinOp, lhs: Expr, rhs: Expr) -> PResult<Expr> {
        let span = lhs.span.to(rhs.span);
        self.node_over(ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span)
    }

    /// A node over its children, refused past [`MAX_EXPR_DEPTH`].
    fn node_over(&mut self, kind: ExprKind, span: Span) -> PResult<Expr> {
        let depth = 1 + children(&kind).map(|c| c.depth).max().unwrap_or(0);
        if depth > MAX_EXPR_DEPTH {
            return Err(self.error(
                Diagnostic::error(span, "expression too deep")
                    .label(format!("more than {MAX_EXPR_DEPTH} operators deep"))
                    .note("split it into several assignments"),
            ));
        }
        Ok(Expr { kind, span, depth })
    }
}

fn leaf(kind: ExprKind, span: Span) -> Expr {
    Expr {
        kind,
        span,
        depth: 1,
    }
}

fn comparison(tok: &Tok) -> Option<BinOp> {
    Some(match tok {
        Tok::Eq | Tok::EqEq => BinOp::Eq,
        Tok::Ne => BinOp::Ne,
        Tok::Lt => BinOp::Lt,
        Tok::Le => BinOp::Le,
        Tok::Gt => BinOp::Gt,
        Tok::Ge => BinOp::Ge,
        _ => return None,
    })
}

/// The direct sub-expressions of a node.
pub(crate) fn children(kind: &ExprKind) -> impl Iterator<Item = &Expr> {
    let (a, b): (Option<&Expr>, Option<&Expr>) = match kind {
        ExprKind::Index(_, e) | ExprKind::Neg(e) | ExprKind::Not(e) | ExprKind::Locked(e) => {
            (Some(e), None)
        }
        ExprKind::Binary(_, l, r) => (Some(l), Some(r)),
        ExprKind::Int(_)
        | ExprKind::Name(_)
        | ExprKind::Clock
        | ExprKind::MsgLen
        | ExprKind::MsgSrc
        | ExprKind::Rank
        | ExprKind::NRanks => (None, None),
    };
    a.into_iter().chain(b)
}
