//! A small, strict XML 1.0 well-formedness checker for tests: one root element, properly nested
//! and closed tags, quoted and unique attributes, only the five predefined entities and character
//! references, no markup characters where they are not allowed. Returns the element tree.
#![allow(dead_code)]

#[derive(Debug, Clone)]
pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
    /// Character data directly inside this element, entities resolved.
    pub text: String,
}

impl Element {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }
}

struct P<'a> {
    s: &'a str,
    i: usize,
}

fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit() || c == '-' || c == '.'
}

fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r')
        || ('\u{20}'..='\u{d7ff}').contains(&c)
        || ('\u{e000}'..='\u{fffd}').contains(&c)
        || c >= '\u{10000}'
}

impl<'a> P<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.i..]
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        let line = self.s[..self.i].matches('\n').count() + 1;
        Err(format!("line {line}: {what}"))
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.rest().starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn ws(&mut self) -> bool {
        let start = self.i;
        while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
            self.bump();
        }
        self.i > start
    }

    fn name(&mut self) -> Result<String, String> {
        let start = self.i;
        match self.peek() {
            Some(c) if is_name_start(c) => {
                self.bump();
            }
            _ => return self.err("expected a name"),
        }
        while matches!(self.peek(), Some(c) if is_name_char(c)) {
            self.bump();
        }
        Ok(self.s[start..self.i].to_string())
    }

    /// An entity or character reference after '&'.
    fn reference(&mut self) -> Result<char, String> {
        let end = match self.rest().find(';') {
            Some(e) if e <= 10 => e,
            _ => return self.err("'&' not followed by a reference"),
        };
        let r = &self.rest()[..end];
        let c = match r {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ if r.starts_with("#x") => u32::from_str_radix(&r[2..], 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or("bad character reference")?,
            _ if r.starts_with('#') => r[1..]
                .parse::<u32>()
                .ok()
                .and_then(char::from_u32)
                .ok_or("bad character reference")?,
            _ => return self.err(&format!("unknown entity &{r};")),
        };
        if !is_xml_char(c) {
            return self.err("reference to a character XML forbids");
        }
        self.i += end + 1;
        Ok(c)
    }

    fn attr_value(&mut self) -> Result<String, String> {
        let q = match self.bump() {
            Some(q @ ('"' | '\'')) => q,
            _ => return self.err("attribute value not quoted"),
        };
        let mut v = String::new();
        loop {
            match self.bump() {
                None => return self.err("unterminated attribute value"),
                Some(c) if c == q => return Ok(v),
                Some('<') => return self.err("'<' in an attribute value"),
                Some('&') => v.push(self.reference()?),
                Some(c) if !is_xml_char(c) => return self.err("forbidden character"),
                Some(c) => v.push(c),
            }
        }
    }

    fn misc(&mut self) -> Result<(), String> {
        loop {
            self.ws();
            if self.eat("<!--") {
                match self.rest().find("-->") {
                    Some(e) => self.i += e + 3,
                    None => return self.err("unterminated comment"),
                }
            } else {
                return Ok(());
            }
        }
    }

    fn element(&mut self, depth: usize) -> Result<Element, String> {
        if depth > 64 {
            return self.err("nested too deep");
        }
        if !self.eat("<") {
            return self.err("expected '<'");
        }
        let name = self.name()?;
        let mut attrs: Vec<(String, String)> = Vec::new();
        loop {
            let had_ws = self.ws();
            if self.eat("/>") {
                return Ok(Element {
                    name,
                    attrs,
                    children: vec![],
                    text: String::new(),
                });
            }
            if self.eat(">") {
                break;
            }
            if !had_ws {
                return self.err("expected whitespace before an attribute");
            }
            let k = self.name()?;
            self.ws();
            if !self.eat("=") {
                return self.err("expected '=' after an attribute name");
            }
            self.ws();
            let v = self.attr_value()?;
            if attrs.iter().any(|(a, _)| *a == k) {
                return self.err(&format!("duplicate attribute {k}"));
            }
            attrs.push((k, v));
        }
        let mut el = Element {
            name,
            attrs,
            children: vec![],
            text: String::new(),
        };
        loop {
            if self.eat("</") {
                let n = self.name()?;
                self.ws();
                if !self.eat(">") {
                    return self.err("expected '>' closing a tag");
                }
                if n != el.name {
                    return self.err(&format!("</{n}> closes <{}>", el.name));
                }
                return Ok(el);
            }
            if self.rest().starts_with("<!--") {
                self.misc()?;
                continue;
            }
            if self.rest().starts_with("<![CDATA[") || self.rest().starts_with("<?") {
                return self.err("CDATA and processing instructions are not expected here");
            }
            if self.rest().starts_with('<') {
                let child = self.element(depth + 1)?;
                el.children.push(child);
                continue;
            }
            match self.bump() {
                None => return self.err(&format!("<{}> is not closed", el.name)),
                Some('&') => {
                    let c = self.reference()?;
                    el.text.push(c)
                }
                Some('>') if el.text.ends_with("]]") => return self.err("']]>' in text"),
                Some(c) if !is_xml_char(c) => return self.err("forbidden character"),
                Some(c) => el.text.push(c),
            }
        }
    }
}

/// Parse a whole document; an error names the line.
pub fn parse(doc: &str) -> Result<Element, String> {
    let mut p = P { s: doc, i: 0 };
    p.eat("\u{feff}");
    if p.eat("<?xml") {
        match p.rest().find("?>") {
            Some(e) => p.i += e + 2,
            None => return p.err("unterminated XML declaration"),
        }
    }
    p.misc()?;
    let root = p.element(0)?;
    p.misc()?;
    if p.i != doc.len() {
        return p.err("content after the root element");
    }
    Ok(root)
}
