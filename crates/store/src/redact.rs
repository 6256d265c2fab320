//! Store URLs with their secrets replaced, for every message that shows one.

/// Whether a setting or parameter called `name` holds a secret (a password, a key, a
/// token): its value is never shown.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["key", "secret", "token", "password"]
        .iter()
        .any(|word| name.contains(word))
}

/// `url` with its secrets replaced by `<redacted>`: the password of
/// `scheme://user:password@host`, query parameters with a secret name
/// (`?password=...`), and the values of such keywords in a libpq `key=value` string
/// (`host=db password='...'`). Anything else is kept, so the result still says where.
pub fn redact_url(url: &str) -> String {
    if !url.contains("://") && is_key_value(url) {
        return redact_key_value(url);
    }
    let mut out = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        // The authority ends at the first '/' or '?' after its last '@' (a password may
        // hold unencoded '/' or '?' by mistake: it is still redacted).
        let at = rest.rfind('@');
        let authority_end = rest[at.map_or(0, |at| at + 1)..]
            .find(['/', '?'])
            .map_or(rest.len(), |end| end + at.map_or(0, |at| at + 1));
        let (authority, tail) = rest.split_at(authority_end);
        if let Some((userinfo, host)) = authority.rsplit_once('@') {
            let userinfo = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:<redacted>"),
                None => userinfo.to_owned(),
            };
            out = format!("{scheme}://{userinfo}@{host}{tail}");
        }
    }
    if let Some((base, query)) = out.clone().split_once('?') {
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret_name(k) => format!("{k}=<redacted>"),
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{base}?{}", query.join("&"));
    }
    out
}

/// Whether `s` is a libpq `key=value` connection string rather than a URL: it starts with
/// a keyword and `=` (`host=...`, `dbname = app`).
pub fn is_key_value(s: &str) -> bool {
    let s = s.trim_start();
    let keyword = s
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    keyword > 0 && s[keyword..].trim_start().starts_with('=')
}

/// A libpq `key=value` string with the values of secret keywords replaced (quoted values
/// may hold spaces and `\'`).
fn redact_key_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim();
        let key = key.rsplit(char::is_whitespace).next().unwrap_or(key);
        out.push_str(&rest[..=eq]);
        let after = &rest[eq + 1..];
        let value_start = after.len() - after.trim_start().len();
        let value = &after[value_start..];
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            // The closing quote is the first unescaped '\'' after the opening one.
            let mut end = value.len();
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '\'' {
                    end = i + 2;
                    break;
                }
            }
            end
        } else {
            // A bare value ends at the first whitespace not escaped by `\`.
            let mut escaped = false;
            value
                .char_indices()
                .find(|&(_, c)| {
                    let ends = !escaped && c.is_whitespace();
                    escaped = !escaped && c == '\\';
                    ends
                })
                .map_or(value.len(), |(i, _)| i)
        };
        out.push_str(&after[..value_start]);
        if is_secret_name(key) {
            out.push_str("<redacted>");
        } else {
            out.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_wherever_they_are() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/prod?schema=a"),
            "postgres://app:<redacted>@db:5432/prod?schema=a"
        );
        assert_eq!(
            redact_url("rediss://default:pw@cache:6380/0"),
            "rediss://default:<redacted>@cache:6380/0"
        );
        assert_eq!(
            redact_url("redis://:s3cret@cache:6379/0"),
            "redis://:<redacted>@cache:6379/0"
        );
        assert_eq!(
            redact_url("postgres://u:p@ss/w?rd@db/prod"),
            "postgres://u:<redacted>@db/prod"
        );
        assert_eq!(
            redact_url("postgres://db/prod?user=a&password=x&sslkey=/k.pem"),
            "postgres://db/prod?user=a&password=<redacted>&sslkey=<redacted>"
        );
        assert_eq!(
            redact_url("sqlite:./durable-mcp.db?synchronous=full"),
            "sqlite:./durable-mcp.db?synchronous=full"
        );
        assert_eq!(
            redact_url("host=db user=app password='it\\'s secret' dbname=prod"),
            "host=db user=app password=<redacted> dbname=prod"
        );
        assert_eq!(
            redact_url("host=db password = hunter2 sslmode=require"),
            "host=db password = <redacted> sslmode=require"
        );
        assert_eq!(redact_url("password='unterminated"), "password=<redacted>");
        assert_eq!(
            redact_url("host = db password = hunter2"),
            "host = db password = <redacted>"
        );
        assert_eq!(
            redact_url("host=db password=ab\\ cd user=u"),
            "host=db password=<redacted> user=u"
        );
    }
}
