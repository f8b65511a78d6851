"""Python source, for the jail, of what upstream ``calculate`` tools compute with ``eval``.

τ-bench's and τ²-bench's ``calculate`` evaluate an expression of digits, ``.``, ``+ - * / ( )`` and spaces with
``eval(expression, {"__builtins__": None}, {})``; the jail has no ``eval``, so importers replace that call with
``jail_arithmetic(expression)``, defined by :data:`ARITHMETIC_SOURCE`, which gives Python's value.
"""

EVAL_CALL = 'eval(expression, {"__builtins__": None}, {})'
EVAL_REPLACEMENT = "jail_arithmetic(expression)"

ARITHMETIC_SOURCE = '''

class _Arithmetic:
    """Python's value for an expression of digits, ``.``, ``+ - * / ( )`` and spaces (what ``calculate``'s
    ``eval`` computes; the jail has no ``eval``)."""

    def __init__(self, text):
        self.tokens = []
        index = 0
        while index < len(text):
            char = text[index]
            if char == " ":
                index += 1
            elif char in "0123456789.":
                end = index
                while end < len(text) and text[end] in "0123456789.":
                    end += 1
                self.tokens.append(text[index:end])
                index = end
            elif text.startswith("**", index) or text.startswith("//", index):
                self.tokens.append(text[index : index + 2])
                index += 2
            else:
                self.tokens.append(char)
                index += 1
        self.position = 0

    def fail(self):
        raise SyntaxError("invalid syntax (<string>, line 1)")

    def peek(self):
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self):
        token = self.peek()
        self.position += 1
        return token

    def value(self):
        if not self.tokens:
            self.fail()
        result = self.sum()
        if self.peek() is not None:
            self.fail()
        return result

    def sum(self):
        result = self.term()
        while self.peek() in ("+", "-"):
            result = result + self.term() if self.take() == "+" else result - self.term()
        return result

    def term(self):
        result = self.factor()
        while self.peek() in ("*", "/", "//"):
            operator = self.take()
            right = self.factor()
            result = result * right if operator == "*" else result / right if operator == "/" else result // right
        return result

    def factor(self):
        if self.peek() == "+":
            self.take()
            return +self.factor()
        if self.peek() == "-":
            self.take()
            return -self.factor()
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() == "**":
            self.take()
            return base ** self.factor()
        return base

    def atom(self):
        token = self.take()
        if token == "(":
            result = self.sum()
            if self.take() != ")":
                self.fail()
            return result
        if token is None or token[0] not in "0123456789.":
            self.fail()
        if token.count(".") > 1 or token == ".":
            self.fail()
        if "." in token:
            return float(token)
        if len(token) > 1 and token[0] == "0" and token.strip("0"):
            self.fail()
        return int(token)


def jail_arithmetic(expression):
    return _Arithmetic(expression).value()

'''
