"""Parse CEL text into ``operators.cel.ast`` nodes.

The grammar is celpy's ``cel.lark``, read at runtime from the installed
package, with a few rules overridden or added for syntax it lacks: optional
selection and indexing (``a.?b``, ``a[?k]``), optional list elements and map
entries (``[?x]``, ``{?k: v}``), trailing commas, back-quoted field names, and
string, float and integer terminals that follow cel-go's lexer more closely.
The Lark tree is then folded into the compact AST, recognising macros.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import celpy
from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from . import ast
from .errors import CELCompileError
from .values import INT64_MAX, INT64_MIN, UINT64_MAX, UInt

_GRAMMAR_ADDITIONS = r"""
%override member : member_dot | member_dot_arg | member_index | member_object
                 | member_optdot | member_optindex | primary
%override member_dot : member "." (IDENT | ESC_IDENT)
member_optdot : member "." "?" (IDENT | ESC_IDENT)
member_optindex : member "[" "?" expr "]"
%override list_lit : "[" [listelems] "]"
listelems : listelem ("," listelem)* [","]
listelem : expr | optelem
optelem : "?" expr
%override map_lit : "{" [mapinits] "}"
%override mapinits : mapinit ("," mapinit)* [","]
mapinit : mapkey ":" expr
mapkey : expr | optelem
%override fieldinits : fieldinit ("," fieldinit)* [","]
fieldinit : (IDENT | optfield) ":" expr
optfield : "?" IDENT

ESC_IDENT : /`[A-Za-z0-9_.\/ -]+`/
%override INT_LIT.2 : /-?/ /0[xX]/ HEXDIGIT+ | /-?/ DIGIT+
%override UINT_LIT.3 : INT_LIT /[uU]/
%override FLOAT_LIT.3 : /-?/ DIGIT* "." DIGIT+ EXPONENT? | /-?/ DIGIT+ EXPONENT
%override STRING_LIT.4 : /[rR]"[^"\r\n]*"/ | /[rR]'[^'\r\n]*'/
                       | /"(?:[^"\\\r\n]|\\.)*"/ | /'(?:[^'\\\r\n]|\\.)*'/
%override MLSTRING_LIT.5 : /[rR]<DQ3>[\s\S]*?<DQ3>/ | /[rR]<SQ3>[\s\S]*?<SQ3>/
                         | /<DQ3>(?:[^\\]|\\[\s\S])*?<DQ3>/ | /<SQ3>(?:[^\\]|\\[\s\S])*?<SQ3>/
%override BYTES_LIT.6 : /[bB]/ MLSTRING_LIT | /[bB]/ STRING_LIT
""".replace("<DQ3>", '"' * 3).replace("<SQ3>", "'" * 3)

RESERVED_WORDS = frozenset(
    [
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)

_parser: Lark | None = None
_parser_lock = threading.Lock()

# Deeper parse trees are refused before they are folded. Without a fixed limit the outcome
# would depend on Python's recursion limit, which other libraries change (celpy raises it
# to 2500 on import). Each level of parentheses costs about ten tree levels and each call
# eleven, so this allows some 150 nested parentheses or 135 nested calls (cel-go stops at a
# parser recursion depth of 250), and everything below it folds and compiles within
# Python's default recursion limit.
MAX_TREE_DEPTH = 1500


def _keyword(token: Token) -> Token:
    if token.value in ("true", "false"):
        return Token("BOOL_LIT", token.value)
    if token.value == "null":
        return Token("NULL_LIT", token.value)
    return token


def _get_parser() -> Lark:
    global _parser
    with _parser_lock:
        if _parser is None:
            text = (Path(celpy.__file__).parent / "cel.lark").read_text()
            _parser = Lark(
                text + _GRAMMAR_ADDITIONS,
                parser="lalr",
                start="expr",
                propagate_positions=True,
                maybe_placeholders=False,
                lexer_callbacks={"IDENT": _keyword},
            )
        return _parser


def _syntax_error(source: str, line: int, column: int, detail: str) -> CELCompileError:
    lines = source.splitlines() or [""]
    snippet = lines[line - 1] if 0 < line <= len(lines) else ""
    return CELCompileError(
        f"ERROR: <input>:{line}:{column}: Syntax error: {detail}\n"
        f" | {snippet}\n"
        f" | {'.' * (column - 1)}^"
    )


def warm() -> None:
    """Build the parser now, not at the first expression parsed (see the package's docs)."""
    _get_parser()


def parse(source: str) -> ast.Node:
    """Parse CEL source text; raises CELCompileError with a cel-go-like message."""
    try:
        tree = _get_parser().parse(source)
    except UnexpectedToken as exc:
        token = exc.token
        shown = "<EOF>" if token.type == "$END" else repr(str(token))
        raise _syntax_error(
            source, exc.line or 1, exc.column or 1, f"mismatched input {shown}"
        ) from None
    except UnexpectedCharacters as exc:
        raise _syntax_error(
            source,
            exc.line,
            exc.column,
            f"token recognition error at: {source[exc.pos_in_stream or 0 : (exc.pos_in_stream or 0) + 1]!r}",
        ) from None
    except UnexpectedInput as exc:
        raise _syntax_error(source, exc.line or 1, exc.column or 1, "unexpected input") from None
    except LarkError as exc:
        raise _syntax_error(source, 1, 1, str(exc).splitlines()[0]) from None
    if _deeper_than(tree, MAX_TREE_DEPTH):
        raise CELCompileError("compilation failed: expression nests too deeply")
    return _Folder(source).fold(tree)


def _deeper_than(tree: Tree, limit: int) -> bool:
    """Whether the tree has more than `limit` levels (walked without recursion)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, Tree))
    return False


# --- literals -------------------------------------------------------------

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    '"': '"',
    "'": "'",
    "\\": "\\",
    "?": "?",
    "`": "`",
}


def _unescape(body: str, as_bytes: bool) -> str | bytes:
    """Decode CEL escapes. In bytes literals \\x and octal escapes are raw bytes."""
    out = bytearray() if as_bytes else None
    chars: list[str] = []

    def put_text(text: str) -> None:
        if out is not None:
            out.extend(text.encode("utf-8"))
        else:
            chars.append(text)

    def put_byte(value: int) -> None:
        if out is not None:
            out.append(value)
        else:
            chars.append(chr(value))

    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            put_text(c)
            i += 1
            continue
        if i + 1 >= n:
            raise ValueError("trailing backslash")
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            put_text(_SIMPLE_ESCAPES[e])
            i += 2
        elif e in "xX":
            put_byte(int(body[i + 2 : i + 4], 16))
            if len(body[i + 2 : i + 4]) != 2:
                raise ValueError("bad hex escape")
            i += 4
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width:
                raise ValueError("bad unicode escape")
            code = int(digits, 16)
            if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF or as_bytes:
                raise ValueError("invalid unicode code point")
            put_text(chr(code))
            i += 2 + width
        elif e in "0123":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(d not in "01234567" for d in digits):
                raise ValueError("bad octal escape")
            put_byte(int(digits, 8))
            i += 4
        else:
            raise ValueError(f"invalid escape sequence \\{e}")
    return bytes(out) if out is not None else "".join(chars)


def decode_string_token(text: str) -> str | bytes:
    as_bytes = text[0] in "bB"
    if as_bytes:
        text = text[1:]
    raw = text[0] in "rR"
    if raw:
        text = text[1:]
    quote = 3 if text[:3] in ('"""', "'''") else 1
    body = text[quote:-quote]
    if raw:
        return body.encode("utf-8") if as_bytes else body
    return _unescape(body, as_bytes)


def _int_literal(text: str) -> int:
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits)
    return -value if negative else value


class _Folder:
    """Folds the Lark tree into ``ast`` nodes."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, node: Tree | Token, message: str) -> CELCompileError:
        line = getattr(node, "line", None) or getattr(getattr(node, "meta", None), "line", 1)
        column = getattr(node, "column", None) or getattr(getattr(node, "meta", None), "column", 1)
        return CELCompileError(f"ERROR: <input>:{line}:{column}: {message}")

    @staticmethod
    def pos(node: Tree | Token) -> tuple[int, int]:
        if isinstance(node, Token):
            return (node.line or 1, node.column or 1)
        meta = node.meta
        return (getattr(meta, "line", 1), getattr(meta, "column", 1))

    def after(self, node: Tree | Token) -> tuple[int, int]:
        """Where the operator token that follows ``node`` is (``==``, ``.``, ``(``, ``[``):
        cel-go gives a call, a selection or an index the position of its operator, so type
        errors point where upstream's do."""
        end = node.end_pos if isinstance(node, Token) else getattr(node.meta, "end_pos", None)
        if end is None:
            return self.pos(node)
        source = self.source
        while end < len(source) and source[end].isspace():
            end += 1
        line_start = source.rfind("\n", 0, end) + 1
        return (source.count("\n", 0, end) + 1, end - line_start + 1)

    def fold(self, node: Tree | Token) -> ast.Node:
        while isinstance(node, Tree) and len(node.children) == 1 and node.data in _PASS_THROUGH:
            node = node.children[0]
        if isinstance(node, Token):
            raise self.error(node, f"unexpected token {node!s}")
        method = getattr(self, "f_" + str(node.data))
        result: ast.Node = method(node)
        return result

    # Binary levels: [left-level-with-operator, right] or [single].
    def f_expr(self, t: Tree) -> ast.Node:
        c, then, otherwise = t.children
        return ast.Cond(self.fold(c), self.fold(then), self.fold(otherwise), pos=self.pos(t))

    def f_conditionalor(self, t: Tree) -> ast.Node:
        left, right = t.children
        return ast.Or(self.fold(left), self.fold(right), pos=self.pos(t))

    def f_conditionaland(self, t: Tree) -> ast.Node:
        left, right = t.children
        return ast.And(self.fold(left), self.fold(right), pos=self.pos(t))

    def _binary(self, t: Tree) -> ast.Node:
        op_node, right = t.children
        assert isinstance(op_node, Tree)
        op = _OPERATORS[str(op_node.data)]
        left = op_node.children[0]
        return ast.Binary(op, self.fold(left), self.fold(right), pos=self.after(left))

    f_relation = f_addition = f_multiplication = _binary

    def f_unary(self, t: Tree) -> ast.Node:
        # cel-go's grammar is `'!'+ member | '-'+ member`: a run of one operator over a
        # member, where a run of even length cancels out (`--x` is `x`, whatever its type)
        # and an odd one is a single operator. A lone '-' before a number is that number's
        # sign, so `-5` is a literal but in `--5` both minus signs are operators, which makes
        # `--9223372036854775808` an out-of-range literal.
        op = self._unary_op(t)
        assert op is not None
        count, operand = 1, self._unwrap(t.children[1])
        while isinstance(operand, Tree) and self._unary_op(operand) == op:
            count += 1
            operand = self._unwrap(operand.children[1])
        signed = self._signed_number(t) if count == 1 and op == "-" else None
        if signed is not None:
            return signed
        folded: ast.Node
        other = self._unary_op(operand)
        if other is not None:
            # The other operator: only a signed number may follow (`!-1`).
            assert isinstance(operand, Tree)
            inner = self._signed_number(operand) if other == "-" else None
            if inner is None:
                raise self.error(
                    operand, f"Syntax error: no viable alternative at input '{op}{other}'"
                )
            folded = inner
        elif op == "-" and self._literal_token(operand) is not None:
            folded = self._unsigned_number(operand)
            if isinstance(folded, ast.Unary):
                count += 1  # the literal's sign was one more operator
                folded = folded.operand
        else:
            folded = self.fold(operand)
        if count % 2 == 0:
            return folded
        return ast.Unary(op, folded, pos=self.pos(t))

    @staticmethod
    def _unwrap(node: Tree | Token) -> Tree | Token:
        while isinstance(node, Tree) and len(node.children) == 1 and node.data in _PASS_THROUGH:
            node = node.children[0]
        return node

    @staticmethod
    def _unary_op(node: Tree | Token) -> str | None:
        if isinstance(node, Tree) and node.data == "unary" and len(node.children) == 2:
            op_node = node.children[0]
            if isinstance(op_node, Tree):
                return "!" if op_node.data == "unary_not" else "-"
        return None

    def _literal_token(self, node: Tree | Token) -> Token | None:
        node = self._unwrap(node)
        if isinstance(node, Tree) and node.data == "literal":
            token = node.children[0]
            if isinstance(token, Token) and token.type in ("INT_LIT", "UINT_LIT", "FLOAT_LIT"):
                return token
        return None

    def _signed_number(self, t: Tree) -> ast.Lit | None:
        """`- 5`: one minus sign and, after blanks only, an unsigned number: a literal."""
        token = self._literal_token(t.children[1])
        start = getattr(t.meta, "start_pos", None)
        if token is None or start is None or token.type == "UINT_LIT" or str(token).startswith("-"):
            return None
        if self.source[start + 1 : token.start_pos].strip():
            return None  # parenthesised: -(5) negates
        literal = self.fold(t.children[1])
        assert isinstance(literal, ast.Lit)
        if type(literal.value) is int:
            if -literal.value < INT64_MIN:
                raise self.error(token, "invalid int literal")
            return ast.Lit(-literal.value, pos=self.pos(t))
        return ast.Lit(-literal.value, pos=self.pos(t))

    def _unsigned_number(self, node: Tree | Token) -> ast.Node:
        """The literal after a run of minus signs; one lexed with its sign comes back as
        Unary('-', magnitude) so that the caller counts the sign as an operator."""
        token = self._literal_token(node)
        assert token is not None
        text = str(token)
        if not text.startswith("-"):
            return self.fold(node)
        magnitude_text = text[1:]
        if token.type == "UINT_LIT":
            magnitude: ast.Node = ast.Lit(
                UInt(_int_literal(magnitude_text[:-1])), pos=self.pos(token)
            )
        elif token.type == "INT_LIT":
            value = _int_literal(magnitude_text)
            if value > INT64_MAX:
                column = (token.column or 1) + 1
                raise CELCompileError(
                    f"ERROR: <input>:{token.line or 1}:{column}: invalid int literal"
                )
            magnitude = ast.Lit(value, pos=self.pos(token))
        else:
            magnitude = ast.Lit(float(magnitude_text), pos=self.pos(token))
        return ast.Unary("-", magnitude, pos=self.pos(token))

    def f_member_dot(self, t: Tree) -> ast.Node:
        operand, name = t.children
        return ast.Select(self.fold(operand), _field_name(name), pos=self.after(operand))

    def f_member_optdot(self, t: Tree) -> ast.Node:
        operand, name = t.children
        return ast.Select(
            self.fold(operand), _field_name(name), optional=True, pos=self.after(operand)
        )

    def f_member_index(self, t: Tree) -> ast.Node:
        operand, index = t.children
        return ast.Index(self.fold(operand), self.fold(index), pos=self.after(operand))

    def f_member_optindex(self, t: Tree) -> ast.Node:
        operand, index = t.children
        return ast.Index(
            self.fold(operand), self.fold(index), optional=True, pos=self.after(operand)
        )

    def f_member_object(self, t: Tree) -> ast.Node:
        type_node = t.children[0]
        type_name = self._qualified_name(type_node)
        fields: list[tuple[str, ast.Node]] = []
        if len(t.children) > 1:
            inits = t.children[1]
            assert isinstance(inits, Tree)
            for init in inits.children:
                assert isinstance(init, Tree)
                name_node, value = init.children
                name = (
                    "?" + str(name_node.children[0])
                    if isinstance(name_node, Tree)
                    else str(name_node)
                )
                fields.append((name, self.fold(value)))
        return ast.StructLit(type_name, tuple(fields), pos=self.pos(t))

    def _qualified_name(self, node: Tree | Token) -> str:
        folded = self.fold(node)
        parts: list[str] = []
        while isinstance(folded, ast.Select) and not folded.optional:
            parts.append(folded.field)
            folded = folded.operand
        if not isinstance(folded, ast.Ident):
            raise self.error(node, "expected a type name before '{'")
        parts.append(("." if folded.root else "") + folded.name)
        return ".".join(reversed(parts))

    def _args(self, t: Tree, start: int) -> tuple[ast.Node, ...]:
        if len(t.children) <= start:
            return ()
        exprlist = t.children[start]
        assert isinstance(exprlist, Tree)
        return tuple(self.fold(c) for c in exprlist.children)

    def f_member_dot_arg(self, t: Tree) -> ast.Node:
        target = self.fold(t.children[0])
        name = str(t.children[1])
        args = self._args(t, 2)
        return _macro_or_call(self, t, name, args, target)

    def f_ident_arg(self, t: Tree) -> ast.Node:
        name = str(t.children[0])
        args = self._args(t, 1)
        return _macro_or_call(self, t, name, args, None)

    def f_dot_ident_arg(self, t: Tree) -> ast.Node:
        name = str(t.children[0])
        return ast.Call(name, self._args(t, 1), None, pos=self.after(t.children[0]))

    def f_ident(self, t: Tree) -> ast.Node:
        return ast.Ident(str(t.children[0]), pos=self.pos(t))

    def f_dot_ident(self, t: Tree) -> ast.Node:
        return ast.Ident(str(t.children[0]), root=True, pos=self.pos(t))

    def f_paren_expr(self, t: Tree) -> ast.Node:
        return self.fold(t.children[0])

    def f_list_lit(self, t: Tree) -> ast.Node:
        elements: list[tuple[ast.Node, bool]] = []
        if t.children:
            listelems = t.children[0]
            assert isinstance(listelems, Tree)
            for elem in listelems.children:
                assert isinstance(elem, Tree)
                inner = elem.children[0]
                if isinstance(inner, Tree) and inner.data == "optelem":
                    elements.append((self.fold(inner.children[0]), True))
                else:
                    elements.append((self.fold(inner), False))
        return ast.ListLit(tuple(elements), pos=self.pos(t))

    def f_map_lit(self, t: Tree) -> ast.Node:
        entries: list[tuple[ast.Node, ast.Node, bool]] = []
        if t.children:
            inits = t.children[0]
            assert isinstance(inits, Tree)
            for init in inits.children:
                assert isinstance(init, Tree)
                key_node, value = init.children
                assert isinstance(key_node, Tree)
                inner = key_node.children[0]
                if isinstance(inner, Tree) and inner.data == "optelem":
                    entries.append((self.fold(inner.children[0]), self.fold(value), True))
                else:
                    entries.append((self.fold(inner), self.fold(value), False))
        return ast.MapLit(tuple(entries), pos=self.pos(t))

    def f_literal(self, t: Tree) -> ast.Node:
        token = t.children[0]
        assert isinstance(token, Token)
        kind, text = token.type, str(token)
        value: Any
        try:
            if kind == "INT_LIT":
                value = _int_literal(text)
                if not INT64_MIN <= value <= INT64_MAX:
                    raise ValueError("integer literal out of range")
            elif kind == "UINT_LIT" and text.startswith("-"):
                # No signed uint literal: the lexer took an operator's minus sign.
                magnitude = ast.Lit(UInt(_int_literal(text[1:-1])), pos=self.pos(t))
                return ast.Unary("-", magnitude, pos=self.pos(t))
            elif kind == "UINT_LIT":
                value = _int_literal(text[:-1])
                if not 0 <= value <= UINT64_MAX:
                    raise ValueError("unsigned integer literal out of range")
                value = UInt(value)
            elif kind == "FLOAT_LIT":
                value = float(text)
            elif kind in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
                value = decode_string_token(text)
            elif kind == "BOOL_LIT":
                value = text == "true"
            elif kind == "NULL_LIT":
                value = None
            else:
                raise ValueError(f"unknown literal {text}")
        except ValueError as exc:
            raise self.error(token, f"Syntax error: {exc}") from None
        return ast.Lit(value, pos=self.pos(t))


def _field_name(token: Tree | Token) -> str:
    text = str(token)
    return text[1:-1] if text.startswith("`") else text


_OPERATORS = {
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_in": "in",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
}

_PASS_THROUGH = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
    }
)

# Macro name -> (allowed argument counts, kind)
_ONE_VAR_MACROS = {"all": "all", "exists": "exists", "exists_one": "exists_one"}
_TWO_VAR_MACROS = {
    "all": "all",
    "exists": "exists",
    "exists_one": "exists_one",
    "existsOne": "exists_one",
}


def _macro_or_call(
    folder: _Folder, t: Tree, name: str, args: tuple[ast.Node, ...], target: ast.Node | None
) -> ast.Node:
    # The call's "(": after the function's name, the first or second child.
    name_token = t.children[0 if target is None else 1]
    pos = folder.after(name_token) if isinstance(name_token, Token) else folder.pos(t)

    def var(node: ast.Node) -> str:
        if not isinstance(node, ast.Ident) or node.root:
            raise folder.error(t, f"argument must be a simple name in macro '{name}'")
        return node.name

    if target is None:
        if name == "has" and len(args) == 1:
            arg = args[0]
            if not isinstance(arg, ast.Select) or arg.optional:
                raise folder.error(t, "invalid argument to has() macro")
            # cel-go places the selection of has() at the macro's call.
            return ast.Has(dataclasses.replace(arg, pos=pos), pos=pos)
        return ast.Call(name, args, None, pos=pos)

    if name == "bind" and len(args) == 3 and isinstance(target, ast.Ident) and target.name == "cel":
        return ast.Bind(var(args[0]), args[1], args[2], pos=pos)
    if name in _ONE_VAR_MACROS and len(args) == 2:
        return ast.Comprehension(
            _ONE_VAR_MACROS[name], target, (var(args[0]),), (args[1],), pos=pos
        )
    if name in _TWO_VAR_MACROS and len(args) == 3:
        return ast.Comprehension(
            _TWO_VAR_MACROS[name], target, (var(args[0]), var(args[1])), (args[2],), pos=pos
        )
    if name == "map" and len(args) in (2, 3):
        return ast.Comprehension("map", target, (var(args[0]),), args[1:], pos=pos)
    if name == "filter" and len(args) == 2:
        return ast.Comprehension("filter", target, (var(args[0]),), (args[1],), pos=pos)
    if name in ("transformList", "transformMap") and len(args) in (3, 4):
        return ast.Comprehension(name, target, (var(args[0]), var(args[1])), args[2:], pos=pos)
    if name in ("optMap", "optFlatMap") and len(args) == 2:
        return ast.OptMap(name == "optFlatMap", target, var(args[0]), args[1], pos=pos)
    return ast.Call(name, args, target, pos=pos)
