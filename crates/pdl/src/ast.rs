//! The syntax tree the parser builds and the code generator walks. Names are lower-case (the
//! language is case-insensitive); every node keeps the span of its source for error messages.
//!
//! Trees are shallow by construction: the parser refuses nesting past
//! [`crate::limits::MAX_NESTING`] and expressions deeper than
//! [`crate::limits::MAX_EXPR_DEPTH`], so walking (and dropping) a tree recursively is safe.

use crate::diag::Span;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    /// Lower-case.
    pub name: String,
    pub span: Span,
}

/// A whole program: `PROGRAM name: declarations [init block] {MESSAGE n: block} END`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub name: Ident,
    /// In source order: a constant may use the constants declared before it, an array size
    /// the constants declared before the array.
    pub decls: Vec<Decl>,
    /// The initialisation block, run once when the program is loaded.
    pub init: Option<Block>,
    pub handlers: Vec<Handler>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decl {
    /// `CONST name = value`.
    Const { name: Ident, value: Expr },
    /// `VAR name` (a scalar) or `VAR name[size]` (an array).
    Var { name: Ident, size: Option<Expr> },
    /// One number of a `TRIGGERS` list.
    Trigger(Expr),
}

/// `MESSAGE trigger: BEGIN ... END`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    pub trigger: Expr,
    pub block: Block,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    /// The `BEGIN` keyword.
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stmt {
    pub kind: StmtKind,
    /// The statement's first token (its keyword, or the assigned name).
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StmtKind {
    Assign {
        place: Place,
        value: Expr,
    },
    If {
        cond: Expr,
        then: Box<Stmt>,
        otherwise: Option<Box<Stmt>>,
    },
    While {
        cond: Expr,
        body: Box<Stmt>,
    },
    Block(Block),
    /// `SEND buf LEN len AS trigger TO program [AT node]`.
    Send {
        buf: Place,
        len: Expr,
        trigger: Expr,
        program: Expr,
        node: Option<Expr>,
    },
    /// `REPLY buf LEN len AS trigger` (extension).
    Reply {
        buf: Place,
        len: Expr,
        trigger: Expr,
    },
    /// `DELIVER buf OFFSET offset INTO segment LEN len`.
    Deliver {
        buf: Place,
        offset: Expr,
        segment: Expr,
        len: Expr,
    },
    /// `GET buf FROM segment OFFSET offset LEN len`.
    Get {
        buf: Place,
        segment: Expr,
        offset: Expr,
        len: Expr,
    },
    /// `RECEIVE buf [OFFSET offset] LEN len` (extension).
    Receive {
        buf: Place,
        offset: Option<Expr>,
        len: Expr,
    },
    Display(Expr),
    ClearLock(Expr),
    SetFlag(Expr),
    Await,
    Stop,
    Drop,
    Pass,
}

/// A variable, or one element of an array: the target of an assignment, or the first byte of
/// a transfer (`SEND msg[0] ...`, `SEND msg ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub name: Ident,
    pub index: Option<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
    /// Height of the tree below and including this node (a leaf is 1).
    pub depth: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprKind {
    Int(i64),
    Name(Ident),
    Index(Ident, Box<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Clock,
    MsgLen,
    MsgSrc,
    Rank,
    NRanks,
    Locked(Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub fn text(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "MOD",
            BinOp::Eq => "=",
            BinOp::Ne => "<>",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "AND",
            BinOp::Or => "OR",
        }
    }

    /// The value of `a op b` as the VM computes it: 64-bit wrapping arithmetic, truncating
    /// division, comparisons and logic giving 0 or 1. `None` for division by zero (a trap).
    pub fn apply(self, a: i64, b: i64) -> Option<i64> {
        let truth = |c: bool| i64::from(c);
        if matches!(self, BinOp::Div | BinOp::Mod) && b == 0 {
            return None;
        }
        Some(match self {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::Mul => a.wrapping_mul(b),
            BinOp::Div => a.wrapping_div(b),
            BinOp::Mod => a.wrapping_rem(b),
            BinOp::Eq => truth(a == b),
            BinOp::Ne => truth(a != b),
            BinOp::Lt => truth(a < b),
            BinOp::Le => truth(a <= b),
            BinOp::Gt => truth(a > b),
            BinOp::Ge => truth(a >= b),
            BinOp::And => truth(a != 0 && b != 0),
            BinOp::Or => truth(a != 0 || b != 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BinOp;

    #[test]
    fn arithmetic_wraps_and_division_by_zero_is_none() {
        assert_eq!(BinOp::Add.apply(i64::MAX, 1), Some(i64::MIN));
        assert_eq!(BinOp::Div.apply(i64::MIN, -1), Some(i64::MIN));
        assert_eq!(BinOp::Mod.apply(i64::MIN, -1), Some(0));
        assert_eq!(BinOp::Mod.apply(-7, 3), Some(-1));
        assert_eq!(BinOp::Div.apply(-7, 2), Some(-3));
        assert_eq!(BinOp::Div.apply(1, 0), None);
        assert_eq!(BinOp::Mod.apply(1, 0), None);
        assert_eq!(BinOp::And.apply(2, 3), Some(1));
        assert_eq!(BinOp::Or.apply(0, 0), Some(0));
    }
}
