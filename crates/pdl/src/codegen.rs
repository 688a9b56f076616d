//! Checking and code generation, in one walk over the tree: every use of a name is resolved
//! where its code is generated, constants are folded, and everything known at compile time is
//! checked there (array bounds, lengths within their variable, segment, lock, trigger and rank
//! numbers in range, trigger blocks matching the `TRIGGERS` list). Errors are collected and the
//! walk goes on, so one run reports them all; a program with any error yields no module.
//!
//! Code after a statement that ends the activation (`AWAIT`, `STOP`, `DROP`, `PASS`) is checked
//! but not emitted, so every emitted instruction is reachable (a verifier rule).

use std::collections::HashMap;

use crate::ast::*;
use crate::diag::{line_col, Diagnostic, Span};
use crate::isa::{Flow, Instr, Region};
use crate::limits::*;
use crate::module::{program_id, Module, Symbol as ModuleSymbol, TriggerEntry};

/// Checks `program` and generates its module.
pub fn generate(source: &str, program: &Program) -> Result<Module, Vec<Diagnostic>> {
    let mut gen = Gen {
        source,
        names: HashMap::new(),
        vars: Vec::new(),
        constants: 0,
        data_len: 0,
        declared_triggers: Vec::new(),
        errors: Vec::new(),
        emit: Emitter::default(),
        in_init: false,
        overflow_reported: false,
    };
    gen.declarations(&program.decls);
    let handlers = gen.match_handlers(&program.handlers);

    gen.in_init = true;
    let init_entry = gen.entry(
        program
            .init
            .as_ref()
            .map(|b| b.stmts.as_slice())
            .unwrap_or(&[]),
    );
    gen.in_init = false;
    let mut triggers = Vec::new();
    for (handler, trigger) in program.handlers.iter().zip(handlers) {
        let entry = gen.entry(&handler.block.stmts);
        if let Some(trigger) = trigger {
            triggers.push(TriggerEntry { trigger, entry });
        }
    }
    triggers.sort_by_key(|t| t.trigger);

    if gen.emit.code.len() > MAX_CODE_BYTES as usize {
        let len = gen.emit.code.len();
        gen.error(
            Diagnostic::error(program.name.span, "program too large")
                .label(format!("{len} bytes of code; at most {MAX_CODE_BYTES}")),
        );
    }
    if !gen.errors.is_empty() {
        gen.errors.truncate(MAX_ERRORS);
        return Err(gen.errors);
    }
    let symbols = gen
        .vars
        .iter()
        .map(|(name, var)| ModuleSymbol {
            name: name.clone(),
            offset: var.offset,
            len: var.words * 8,
            array: var.array,
        })
        .collect();
    Ok(Module {
        name: program.name.name.clone(),
        data_len: gen.data_len,
        // No error means the depth stayed within MAX_STACK_DEPTH, a u16.
        stack_depth: gen.emit.max_depth as u16,
        init_entry,
        triggers,
        symbols,
        code: gen.emit.code,
    })
}

#[derive(Debug, Clone, Copy)]
struct Var {
    /// Byte offset in the data section.
    offset: u32,
    words: u32,
    array: bool,
}

#[derive(Debug, Clone, Copy)]
enum Symbol {
    Const(i64),
    Var(Var),
}

/// A declared name, with where it was declared (for "declared twice" notes).
#[derive(Debug, Clone, Copy)]
struct Declared {
    symbol: Symbol,
    span: Span,
}

/// What an index known at compile time turned out to be.
enum Index {
    Const(u32),
    Runtime,
    Bad,
}

struct Gen<'a> {
    source: &'a str,
    names: HashMap<String, Declared>,
    /// Variables in declaration order: the module's symbol table.
    vars: Vec<(String, Var)>,
    constants: usize,
    data_len: u32,
    declared_triggers: Vec<(u16, Span)>,
    errors: Vec<Diagnostic>,
    emit: Emitter,
    /// In the initialisation block, where there is no triggering message.
    in_init: bool,
    /// The stack overflow of the current statement is already reported.
    overflow_reported: bool,
}

impl Gen<'_> {
    fn error(&mut self, diagnostic: Diagnostic) {
        self.errors.push(diagnostic);
    }

    fn at(&self, span: Span) -> String {
        let (line, col) = line_col(self.source, span.start as usize);
        format!("{line}:{col}")
    }

    fn lookup(&self, name: &Ident) -> Option<Symbol> {
        self.names.get(&name.name).map(|d| d.symbol)
    }

    fn undeclared(&mut self, name: &Ident) {
        self.error(
            Diagnostic::error(name.span, format!("undeclared name `{}`", name.name))
                .label("not declared in any VAR or CONST section"),
        );
    }

    // ---- declarations ----

    fn declarations(&mut self, decls: &[Decl]) {
        for decl in decls {
            match decl {
                Decl::Const { name, value } => self.declare_const(name, value),
                Decl::Var { name, size } => self.declare_var(name, size.as_ref()),
                Decl::Trigger(number) => self.declare_trigger(number),
            }
        }
    }

    fn define(&mut self, name: &Ident, symbol: Symbol) -> bool {
        if let Some(first) = self.names.get(&name.name) {
            let first = self.at(first.span);
            self.error(
                Diagnostic::error(name.span, format!("`{}` is declared twice", name.name))
                    .label("declared again here")
                    .note(format!("first declared at {first}")),
            );
            return false;
        }
        self.names.insert(
            name.name.clone(),
            Declared {
                symbol,
                span: name.span,
            },
        );
        true
    }

    fn declare_const(&mut self, name: &Ident, value: &Expr) {
        let value = self.require_const(value, "a constant's value").unwrap_or(0);
        if self.constants == MAX_CONSTANTS {
            return self.error(
                Diagnostic::error(name.span, "too many constants")
                    .label(format!("at most {MAX_CONSTANTS}")),
            );
        }
        if self.define(name, Symbol::Const(value)) {
            self.constants += 1;
        }
    }

    fn declare_var(&mut self, name: &Ident, size: Option<&Expr>) {
        let words = match size {
            None => 1,
            Some(size) => match self.require_const(size, "an array size") {
                Some(n) if (1..=i64::from(MAX_DATA_BYTES / 8)).contains(&n) => n as u32,
                Some(n) => {
                    return self.error(
                        Diagnostic::error(size.span, format!("array size {n} out of range"))
                            .label(format!("must be 1 to {}", MAX_DATA_BYTES / 8)),
                    )
                }
                None => return,
            },
        };
        if self.vars.len() == MAX_VARIABLES {
            return self.error(
                Diagnostic::error(name.span, "too many variables")
                    .label(format!("at most {MAX_VARIABLES}")),
            );
        }
        let end = u64::from(self.data_len) + u64::from(words) * 8;
        if end > u64::from(MAX_DATA_BYTES) {
            return self.error(
                Diagnostic::error(name.span, "data section too large").label(format!(
                    "the variables would need {end} bytes; at most {MAX_DATA_BYTES}"
                )),
            );
        }
        let var = Var {
            offset: self.data_len,
            words,
            array: size.is_some(),
        };
        if self.define(name, Symbol::Var(var)) {
            self.vars.push((name.name.clone(), var));
            self.data_len = end as u32;
        }
    }

    fn declare_trigger(&mut self, number: &Expr) {
        let Some(trigger) = self.trigger_number(number) else {
            return;
        };
        if let Some(&(_, first)) = self.declared_triggers.iter().find(|(t, _)| *t == trigger) {
            let first = self.at(first);
            return self.error(
                Diagnostic::error(number.span, format!("trigger {trigger} is declared twice"))
                    .label("declared again here")
                    .note(format!("first declared at {first}")),
            );
        }
        if self.declared_triggers.len() == MAX_TRIGGERS {
            return self.error(
                Diagnostic::error(number.span, "too many triggers")
                    .label(format!("at most {MAX_TRIGGERS}")),
            );
        }
        self.declared_triggers.push((trigger, number.span));
    }

    fn trigger_number(&mut self, number: &Expr) -> Option<u16> {
        let value = self.require_const(number, "a trigger number")?;
        match u16::try_from(value) {
            Ok(trigger) => Some(trigger),
            Err(_) => {
                self.error(
                    Diagnostic::error(number.span, format!("trigger number {value} out of range"))
                        .label(format!("must be 0 to {MAX_TRIGGER}")),
                );
                None
            }
        }
    }

    /// The trigger of each handler, `None` where it is wrong (reported). Every declared trigger
    /// needs exactly one handler.
    fn match_handlers(&mut self, handlers: &[Handler]) -> Vec<Option<u16>> {
        let mut seen: Vec<(u16, Span)> = Vec::new();
        let mut out = Vec::new();
        for handler in handlers {
            let span = handler.trigger.span;
            let trigger = self.trigger_number(&handler.trigger);
            let trigger = trigger.filter(|&t| {
                if let Some(&(_, first)) = seen.iter().find(|(s, _)| *s == t) {
                    let first = self.at(first);
                    self.error(
                        Diagnostic::error(span, format!("a second MESSAGE block for trigger {t}"))
                            .label("trigger already handled")
                            .note(format!("the first block is at {first}")),
                    );
                    return false;
                }
                seen.push((t, span));
                if !self.declared_triggers.iter().any(|(d, _)| *d == t) {
                    self.error(
                        Diagnostic::error(span, format!("trigger {t} is not declared"))
                            .label("not in the TRIGGERS list")
                            .note(format!("add it: `TRIGGERS {t};`")),
                    );
                    return false;
                }
                true
            });
            out.push(trigger);
        }
        for (t, span) in self.declared_triggers.clone() {
            if !seen.iter().any(|(s, _)| *s == t) {
                self.error(
                    Diagnostic::error(span, format!("trigger {t} has no MESSAGE block"))
                        .label("declared here")
                        .note(format!(
                            "add `MESSAGE {t}: BEGIN ... END;` or remove it from TRIGGERS"
                        )),
                );
            }
        }
        out
    }

    // ---- constants ----

    /// The value of `e` if it is constant, `None` if it is not; an error for a constant
    /// division by zero.
    fn const_eval(&self, e: &Expr) -> Result<Option<i64>, Diagnostic> {
        Ok(match &e.kind {
            ExprKind::Int(v) => Some(*v),
            ExprKind::Name(name) => match self.lookup(name) {
                Some(Symbol::Const(v)) => Some(v),
                _ => None,
            },
            ExprKind::Neg(a) => self.const_eval(a)?.map(i64::wrapping_neg),
            ExprKind::Not(a) => self.const_eval(a)?.map(|v| i64::from(v == 0)),
            ExprKind::Binary(op, l, r) => match (self.const_eval(l)?, self.const_eval(r)?) {
                (Some(a), Some(b)) => Some(op.apply(a, b).ok_or_else(|| {
                    Diagnostic::error(e.span, "division by zero").label("the divisor is 0")
                })?),
                _ => None,
            },
            ExprKind::Index(..)
            | ExprKind::Clock
            | ExprKind::MsgLen
            | ExprKind::MsgSrc
            | ExprKind::Rank
            | ExprKind::NRanks
            | ExprKind::Locked(_) => None,
        })
    }

    /// The value of an expression that must be constant (`what` says where it stands).
    fn require_const(&mut self, e: &Expr, what: &str) -> Option<i64> {
        match self.const_eval(e) {
            Ok(Some(v)) => Some(v),
            Ok(None) => {
                let (span, why) = self.non_constant_part(e);
                self.error(
                    Diagnostic::error(span, format!("{what} must be a constant"))
                        .label(why)
                        .note("constants are numbers, CONST names declared earlier, and operators on them"),
                );
                None
            }
            Err(d) => {
                self.error(d);
                None
            }
        }
    }

    /// The first part of `e` that is not constant, and why.
    fn non_constant_part(&self, e: &Expr) -> (Span, String) {
        let why = match &e.kind {
            ExprKind::Name(name) | ExprKind::Index(name, _) => match self.lookup(name) {
                Some(Symbol::Var(_)) => format!("`{}` is a variable", name.name),
                Some(Symbol::Const(_)) => return self.first_non_constant_child(e),
                None => format!("`{}` is not declared (before this point)", name.name),
            },
            ExprKind::Clock
            | ExprKind::MsgLen
            | ExprKind::MsgSrc
            | ExprKind::Rank
            | ExprKind::NRanks => "known only at run time".to_string(),
            ExprKind::Locked(_) => "a lock is read at run time".to_string(),
            _ => return self.first_non_constant_child(e),
        };
        (e.span, why)
    }

    fn first_non_constant_child(&self, e: &Expr) -> (Span, String) {
        for child in crate::parser::children(&e.kind) {
            if !matches!(self.const_eval(child), Ok(Some(_))) {
                return self.non_constant_part(child);
            }
        }
        (e.span, "not a constant".to_string())
    }

    // ---- entries and statements ----

    /// Generates one block as an entry point and returns its code offset.
    fn entry(&mut self, stmts: &[Stmt]) -> u32 {
        let entry = self.emit.start_entry();
        for stmt in stmts {
            self.stmt(stmt);
        }
        // Falling off the end of a block ends the activation, as AWAIT does.
        self.emit.emit(Instr::Await);
        entry
    }

    fn stmt(&mut self, stmt: &Stmt) {
        // Statements start and end with an empty stack. After an error an operand may be left
        // behind (a value computed for an assignment that could not be emitted); resetting at
        // both ends keeps every path into a label at the same depth, so the emitter's
        // bookkeeping stays consistent (no module is produced then anyway).
        self.emit.depth = 0;
        self.overflow_reported = false;
        self.stmt_kind(stmt);
        self.emit.depth = 0;
    }

    fn stmt_kind(&mut self, stmt: &Stmt) {
        match &stmt.kind {
            StmtKind::Assign { place, value } => self.assign(place, value),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => self.if_stmt(cond, then, otherwise.as_deref()),
            StmtKind::While { cond, body } => self.while_stmt(cond, body),
            StmtKind::Block(block) => {
                for s in &block.stmts {
                    self.stmt(s);
                }
            }
            StmtKind::Send {
                buf,
                len,
                trigger,
                program,
                node,
            } => self.send(buf, len, trigger, program, node.as_ref()),
            StmtKind::Reply { buf, len, trigger } => {
                self.message_only(stmt.span, "REPLY");
                let region = self.transfer(buf, len);
                self.operand(trigger, 0, MAX_TRIGGER, "trigger number");
                self.emit_with(region, Instr::Reply);
            }
            StmtKind::Deliver {
                buf,
                offset,
                segment,
                len,
            }
            | StmtKind::Get {
                buf,
                segment,
                offset,
                len,
            } => {
                let region = self.transfer(buf, len);
                self.operand(segment, 0, MAX_SEGMENT, "segment id");
                self.operand(offset, 0, i64::MAX, "segment offset");
                let make = if matches!(stmt.kind, StmtKind::Get { .. }) {
                    Instr::Get
                } else {
                    Instr::Deliver
                };
                self.emit_with(region, make);
            }
            StmtKind::Receive { buf, offset, len } => {
                let region = self.transfer(buf, len);
                match offset {
                    Some(offset) => self.operand(offset, 0, i64::MAX, "message offset"),
                    None => self.emit.emit(Instr::Push(0)),
                }
                self.emit_with(region, Instr::Receive);
            }
            StmtKind::Display(value) => {
                self.expr(value);
                self.emit.emit(Instr::Display);
            }
            StmtKind::ClearLock(lock) => {
                self.operand(lock, 0, MAX_LOCK, "lock number");
                self.emit.emit(Instr::ClearLock);
            }
            StmtKind::SetFlag(flag) => {
                self.operand(flag, 0, MAX_LOCK, "flag number");
                self.emit.emit(Instr::SetFlag);
            }
            StmtKind::Await => self.emit.emit(Instr::Await),
            StmtKind::Stop => self.emit.emit(Instr::Stop),
            StmtKind::Drop => {
                self.message_only(stmt.span, "DROP");
                self.emit.emit(Instr::Drop);
            }
            StmtKind::Pass => {
                self.message_only(stmt.span, "PASS");
                self.emit.emit(Instr::Pass);
            }
        }
    }

    /// `DROP`, `PASS` and `REPLY` act on the triggering message, which the initialisation
    /// block does not have.
    fn message_only(&mut self, span: Span, what: &str) {
        if self.in_init {
            self.error(
                Diagnostic::error(span, format!("{what} in the initialisation block"))
                    .label("there is no triggering message here")
                    .note(format!("{what} may only be used in a MESSAGE block")),
            );
        }
    }

    fn emit_with(&mut self, region: Option<Region>, make: fn(Region) -> Instr) {
        if let Some(region) = region {
            self.emit.emit(make(region));
        }
    }

    fn assign(&mut self, place: &Place, value: &Expr) {
        let name = &place.name;
        let var = match self.lookup(name) {
            Some(Symbol::Var(var)) => var,
            Some(Symbol::Const(_)) => {
                self.error(
                    Diagnostic::error(
                        name.span,
                        format!("cannot assign to the constant `{}`", name.name),
                    )
                    .label("declared in CONST"),
                );
                return self.expr(value);
            }
            None => {
                self.undeclared(name);
                return self.expr(value);
            }
        };
        match (&place.index, var.array) {
            (None, false) => {
                self.expr(value);
                self.emit.emit(Instr::Store(var.offset));
            }
            (Some(index), true) => match self.index(name, var, index) {
                Index::Const(i) => {
                    self.expr(value);
                    self.emit.emit(Instr::Store(var.offset + 8 * i));
                }
                Index::Runtime => {
                    self.expr(index);
                    self.expr(value);
                    self.emit.emit(Instr::StoreX(region_of(var)));
                }
                Index::Bad => self.expr(value),
            },
            (None, true) => {
                self.array_without_index(name, var);
                self.expr(value);
            }
            (Some(_), false) => {
                self.not_an_array(name, place.span);
                self.expr(value);
            }
        }
    }

    fn if_stmt(&mut self, cond: &Expr, then: &Stmt, otherwise: Option<&Stmt>) {
        self.expr(cond);
        let else_label = self.emit.label();
        self.emit.jump(Instr::Jz, else_label);
        self.stmt(then);
        match otherwise {
            None => self.emit.place(else_label),
            Some(otherwise) => {
                let end = self.emit.label();
                self.emit.jump(Instr::Jmp, end);
                self.emit.place(else_label);
                self.stmt(otherwise);
                self.emit.place(end);
            }
        }
    }

    fn while_stmt(&mut self, cond: &Expr, body: &Stmt) {
        let head = self.emit.label();
        let end = self.emit.label();
        self.emit.place(head);
        self.emit.depth = 0;
        self.expr(cond);
        self.emit.jump(Instr::Jz, end);
        self.stmt(body);
        self.emit.loop_back(head);
        self.emit.place(end);
    }

    fn send(
        &mut self,
        buf: &Place,
        len: &Expr,
        trigger: &Expr,
        program: &Expr,
        node: Option<&Expr>,
    ) {
        let region = self.transfer(buf, len);
        self.operand(trigger, 0, MAX_TRIGGER, "trigger number");
        match &program.kind {
            // `TO name`, where the name is no variable or constant: a program by name.
            ExprKind::Name(name) if self.lookup(name).is_none() => {
                self.emit
                    .emit(Instr::Push(i64::from(program_id(&name.name))));
            }
            _ => self.operand(program, 0, MAX_PROGRAM_ID, "program id"),
        }
        match node {
            Some(node) => self.operand(node, 0, i64::MAX, "rank"),
            None => self.emit.emit(Instr::Rank),
        }
        self.emit_with(region, Instr::Send);
    }

    /// The variable part of a transfer: pushes the first element's index and the length, and
    /// returns the variable's region; checks what is known at compile time.
    fn transfer(&mut self, buf: &Place, len: &Expr) -> Option<Region> {
        let name = &buf.name;
        let var = match self.lookup(name) {
            Some(Symbol::Var(var)) => Some(var),
            Some(Symbol::Const(_)) => {
                self.error(
                    Diagnostic::error(name.span, format!("`{}` is a constant", name.name))
                        .label("a variable is needed here: bytes are moved to or from it"),
                );
                None
            }
            None => {
                self.undeclared(name);
                None
            }
        };
        let start = match (var, &buf.index) {
            (Some(var), Some(index)) if var.array => self.index(name, var, index),
            (Some(_), Some(_)) => {
                self.not_an_array(name, buf.span);
                Index::Bad
            }
            _ => Index::Const(0),
        };
        match start {
            Index::Const(i) => self.emit.emit(Instr::Push(i64::from(i))),
            Index::Runtime => self.expr(buf.index.as_ref()?),
            Index::Bad => self.emit.emit(Instr::Push(0)),
        }
        let Some(var) = var else {
            self.expr(len);
            return None;
        };
        self.length(len, buf, var, &start);
        matches!(start, Index::Const(_) | Index::Runtime).then(|| region_of(var))
    }

    /// The `LEN` of a transfer: at most [`MAX_TRANSFER_BYTES`], within the variable from the
    /// first element when both are constant.
    fn length(&mut self, len: &Expr, buf: &Place, var: Var, start: &Index) {
        let value = match self.const_eval(len) {
            Ok(Some(v)) => v,
            Ok(None) => return self.expr(len),
            Err(d) => {
                self.error(d);
                return self.emit.emit(Instr::Push(0));
            }
        };
        self.emit.emit(Instr::Push(value));
        if !(0..=MAX_TRANSFER_BYTES).contains(&value) {
            return self.error(
                Diagnostic::error(len.span, format!("length {value} out of range"))
                    .label(format!("must be 0 to {MAX_TRANSFER_BYTES} bytes")),
            );
        }
        if let Index::Const(i) = start {
            let room = i64::from(var.words - i) * 8;
            if value > room {
                let from = match &buf.index {
                    Some(_) => format!("from element {i} of `{}`", buf.name.name),
                    None => format!("`{}`", buf.name.name),
                };
                self.error(
                    Diagnostic::error(
                        len.span,
                        format!("LEN {value} reaches past the end of `{}`", buf.name.name),
                    )
                    .label(format!("{from} there are {room} bytes"))
                    .note(format!(
                        "`{}` has {} bytes (8 per element); LEN counts bytes",
                        buf.name.name,
                        var.words * 8
                    )),
                );
            }
        }
    }

    /// An index of `var`: constant and in bounds, run-time (checked by the VM), or wrong.
    fn index(&mut self, name: &Ident, var: Var, index: &Expr) -> Index {
        match self.const_eval(index) {
            Ok(Some(i)) if (0..i64::from(var.words)).contains(&i) => Index::Const(i as u32),
            Ok(Some(i)) => {
                self.error(
                    Diagnostic::error(index.span, format!("index {i} out of bounds")).label(
                        format!(
                            "`{}` has {} elements: 0 to {}",
                            name.name,
                            var.words,
                            var.words - 1
                        ),
                    ),
                );
                Index::Bad
            }
            Ok(None) => Index::Runtime,
            Err(d) => {
                self.error(d);
                Index::Bad
            }
        }
    }

    fn array_without_index(&mut self, name: &Ident, var: Var) {
        self.error(
            Diagnostic::error(name.span, format!("`{}` is an array", name.name))
                .label(format!("an element is needed: `{}[i]`", name.name))
                .note(format!("`{}` has {} elements", name.name, var.words)),
        );
    }

    fn not_an_array(&mut self, name: &Ident, span: Span) {
        self.error(
            Diagnostic::error(span, format!("`{}` is not an array", name.name))
                .label("declared without a size, so it cannot be indexed"),
        );
    }

    /// An operand that must lie in `min..=max` (checked here when it is constant, by the VM
    /// otherwise).
    fn operand(&mut self, e: &Expr, min: i64, max: i64, what: &str) {
        if let Ok(Some(value)) = self.const_eval(e) {
            if !(min..=max).contains(&value) {
                self.error(
                    Diagnostic::error(e.span, format!("{what} {value} out of range"))
                        .label(format!("must be {min} to {max}")),
                );
            }
        }
        self.expr(e);
    }

    // ---- expressions ----

    /// Pushes the value of `e`.
    fn expr(&mut self, e: &Expr) {
        match self.const_eval(e) {
            Ok(Some(v)) => self.emit.emit(Instr::Push(v)),
            Ok(None) => self.runtime_expr(e),
            Err(d) => {
                self.error(d);
                self.emit.emit(Instr::Push(0));
            }
        }
        if self.emit.depth > i32::from(MAX_STACK_DEPTH) && !self.overflow_reported {
            self.overflow_reported = true;
            self.error(
                Diagnostic::error(e.span, "expression too complex")
                    .label(format!(
                        "needs more than {MAX_STACK_DEPTH} words of operand stack here"
                    ))
                    .note("compute parts of it into variables first"),
            );
        }
    }

    fn runtime_expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Name(name) => self.name_value(name),
            ExprKind::Index(name, index) => self.element_value(name, index, e.span),
            ExprKind::Neg(a) => {
                self.expr(a);
                self.emit.emit(Instr::Neg);
            }
            ExprKind::Not(a) => {
                self.expr(a);
                self.emit.emit(Instr::Not);
            }
            ExprKind::Binary(BinOp::And, l, r) => self.and_or(l, r, Instr::Jz, 0),
            ExprKind::Binary(BinOp::Or, l, r) => self.and_or(l, r, Instr::Jnz, 1),
            ExprKind::Binary(op, l, r) => {
                if matches!(op, BinOp::Div | BinOp::Mod)
                    && matches!(self.const_eval(r), Ok(Some(0)))
                {
                    self.error(
                        Diagnostic::error(r.span, "division by zero").label("the divisor is 0"),
                    );
                }
                self.expr(l);
                self.expr(r);
                self.emit.emit(arithmetic(*op));
            }
            ExprKind::Clock => self.emit.emit(Instr::Clock),
            ExprKind::MsgLen => self.emit.emit(Instr::MsgLen),
            ExprKind::MsgSrc => self.emit.emit(Instr::MsgSrc),
            ExprKind::Rank => self.emit.emit(Instr::Rank),
            ExprKind::NRanks => self.emit.emit(Instr::NRanks),
            ExprKind::Locked(lock) => {
                self.operand(lock, 0, MAX_LOCK, "lock number");
                self.emit.emit(Instr::Locked);
            }
            // Constant: handled by `expr`.
            ExprKind::Int(v) => self.emit.emit(Instr::Push(*v)),
        }
    }

    fn name_value(&mut self, name: &Ident) {
        match self.lookup(name) {
            Some(Symbol::Var(var)) if !var.array => self.emit.emit(Instr::Load(var.offset)),
            Some(Symbol::Var(var)) => {
                self.array_without_index(name, var);
                self.emit.emit(Instr::Push(0));
            }
            Some(Symbol::Const(v)) => self.emit.emit(Instr::Push(v)),
            None => {
                self.undeclared(name);
                self.emit.emit(Instr::Push(0));
            }
        }
    }

    fn element_value(&mut self, name: &Ident, index: &Expr, span: Span) {
        let var = match self.lookup(name) {
            Some(Symbol::Var(var)) if var.array => var,
            Some(Symbol::Var(_)) => {
                self.not_an_array(name, span);
                return self.emit.emit(Instr::Push(0));
            }
            Some(Symbol::Const(_)) => {
                self.error(
                    Diagnostic::error(
                        name.span,
                        format!("`{}` is a constant, not an array", name.name),
                    )
                    .label("cannot be indexed"),
                );
                return self.emit.emit(Instr::Push(0));
            }
            None => {
                self.undeclared(name);
                return self.emit.emit(Instr::Push(0));
            }
        };
        match self.index(name, var, index) {
            Index::Const(i) => self.emit.emit(Instr::Load(var.offset + 8 * i)),
            Index::Runtime => {
                self.expr(index);
                self.emit.emit(Instr::LoadX(region_of(var)));
            }
            Index::Bad => self.emit.emit(Instr::Push(0)),
        }
    }

    /// `l AND r` and `l OR r`, short-circuit: `r` is evaluated only when `l` does not decide
    /// (`skip` jumps when it does, leaving `decided`). The result is 0 or 1.
    fn and_or(&mut self, l: &Expr, r: &Expr, skip: fn(u32) -> Instr, decided: i64) {
        let short = self.emit.label();
        let end = self.emit.label();
        self.expr(l);
        self.emit.jump(skip, short);
        self.expr(r);
        self.emit.emit(Instr::Bool);
        self.emit.jump(Instr::Jmp, end);
        self.emit.place(short);
        self.emit.emit(Instr::Push(decided));
        self.emit.place(end);
    }
}

fn region_of(var: Var) -> Region {
    Region {
        offset: var.offset,
        len: var.words * 8,
    }
}

fn arithmetic(op: BinOp) -> Instr {
    match op {
        BinOp::Add => Instr::Add,
        BinOp::Sub => Instr::Sub,
        BinOp::Mul => Instr::Mul,
        BinOp::Div => Instr::Div,
        BinOp::Mod => Instr::Mod,
        BinOp::Eq => Instr::Eq,
        BinOp::Ne => Instr::Ne,
        BinOp::Lt => Instr::Lt,
        BinOp::Le => Instr::Le,
        BinOp::Gt => Instr::Gt,
        BinOp::Ge => Instr::Ge,
        // Never reached: `runtime_expr` generates AND and OR with jumps (`and_or`), and a
        // constant one is folded. Total anyway, as everything in the compiler.
        BinOp::And => Instr::Mul,
        BinOp::Or => Instr::Add,
    }
}

/// A jump target; resolved when placed.
#[derive(Debug, Clone, Copy)]
struct Label(usize);

#[derive(Debug, Default)]
struct LabelState {
    pos: Option<u32>,
    /// Stack depth of the jumps to it; `None` while no emitted jump goes there.
    depth: Option<i32>,
    /// Where the target operands of forward jumps to it are, to patch when placed.
    fixups: Vec<usize>,
}

/// The code being generated, the stack depth at the current point, and whether that point is
/// reachable (code at an unreachable point is not emitted).
#[derive(Debug, Default)]
struct Emitter {
    code: Vec<u8>,
    depth: i32,
    max_depth: i32,
    reachable: bool,
    labels: Vec<LabelState>,
}

impl Emitter {
    fn pos(&self) -> u32 {
        // Past MAX_CODE_BYTES the program is refused; saturating keeps this total until then.
        u32::try_from(self.code.len()).unwrap_or(u32::MAX)
    }

    fn start_entry(&mut self) -> u32 {
        self.reachable = true;
        self.depth = 0;
        self.pos()
    }

    fn emit(&mut self, instr: Instr) {
        let effect = instr.stack_effect();
        self.depth += i32::from(effect.pushes) - i32::from(effect.pops);
        if self.reachable {
            self.max_depth = self.max_depth.max(self.depth);
            instr.encode(&mut self.code);
        }
        if !matches!(instr.flow(), Flow::Next | Flow::Branch(_)) {
            self.reachable = false;
        }
    }

    fn label(&mut self) -> Label {
        self.labels.push(LabelState::default());
        Label(self.labels.len() - 1)
    }

    /// A forward jump to `label` (placed later).
    fn jump(&mut self, make: fn(u32) -> Instr, label: Label) {
        let was_reachable = self.reachable;
        let operand_at = self.code.len() + 1;
        self.emit(make(0));
        if was_reachable {
            let state = &mut self.labels[label.0];
            state.fixups.push(operand_at);
            state.depth = Some(self.depth);
        }
    }

    /// `label` is here: forward jumps to it are patched, and it is reachable if they exist.
    fn place(&mut self, label: Label) {
        let pos = self.pos();
        let state = &mut self.labels[label.0];
        state.pos = Some(pos);
        for &at in &state.fixups {
            self.code[at..at + 4].copy_from_slice(&pos.to_le_bytes());
        }
        if let Some(depth) = state.depth {
            debug_assert!(
                !self.reachable || self.depth == depth,
                "paths disagree on the stack depth"
            );
            self.reachable = true;
            self.depth = depth;
        }
    }

    /// `LOOP` back to `label`, placed earlier.
    fn loop_back(&mut self, label: Label) {
        let target = self.labels[label.0].pos.unwrap_or(0);
        self.emit(Instr::Loop(target));
    }
}
