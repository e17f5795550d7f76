import unittest

from confparse import ParseError, parse


class ParseTest(unittest.TestCase):
    def test_keys_before_any_section_go_to_default(self):
        self.assertEqual(parse("name = demo\n"), {"default": {"name": "demo"}})

    def test_sections_comments_and_blank_lines(self):
        text = "# top comment\n[server]\nhost = example.org\n\n; another comment\nport = 8080\n"
        self.assertEqual(parse(text)["server"], {"host": "example.org", "port": "8080"})

    def test_quoted_value_keeps_surrounding_spaces(self):
        self.assertEqual(parse('greeting = "  hi  "\n')["default"]["greeting"], "  hi  ")

    def test_line_without_equals_sign_is_an_error(self):
        with self.assertRaises(ParseError) as caught:
            parse("[a]\njust words\n")
        self.assertEqual(caught.exception.line_number, 2)

    def test_value_may_contain_equals_sign(self):
        # Reported bug: a connection string in a value crashes the parser.
        config = parse("[db]\ndsn = host=db port=5432\n")
        self.assertEqual(config["db"]["dsn"], "host=db port=5432")


if __name__ == "__main__":
    unittest.main()
