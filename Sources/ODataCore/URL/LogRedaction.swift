/// What may be logged of a request above `trace` level.
public enum LogRedaction {
    /// `url` without its query option values and key predicates, which may hold personal
    /// data: `https://h/odata/Customers('ALFKI')/Orders?$filter=City eq 'Rome'&$top=5` gives
    /// `https://h/odata/Customers(…)/Orders?$filter=…&$top=…`. Linear in the URL's length.
    public static func url(_ url: String) -> String {
        let cut = url.firstIndex { $0 == "?" || $0 == "#" } ?? url.endIndex
        var result = ""
        var depth = 0
        var path = url[..<cut]
        // Credentials in the authority (`https://user:secret@host/`) are dropped.
        if let scheme = path.range(of: "://") {
            let authorityEnd = path[scheme.upperBound...].firstIndex(of: "/") ?? path.endIndex
            if let at = path[scheme.upperBound..<authorityEnd].lastIndex(of: "@") {
                result = String(path[..<scheme.upperBound])
                path = path[path.index(after: at)...]
            }
        }
        var quoted = false
        for character in path {
            if depth > 0, character == "'" {
                quoted.toggle()
            } else if quoted {
                continue
            } else if character == "(" {
                if depth == 0 { result += "(…" }
                depth += 1
            } else if character == ")", depth > 0 {
                depth -= 1
                if depth == 0 { result += ")" }
            } else if depth == 0 {
                result.append(character)
            }
        }
        if depth > 0 { result += ")" }
        guard cut < url.endIndex, url[cut] == "?" else { return result }
        let query = url[url.index(after: cut)...].prefix { $0 != "#" }
        let names = query.split(separator: "&").map { option -> String in
            guard let equals = option.firstIndex(of: "=") else { return String(option) }
            return option[..<equals] + "=…"
        }
        return result + "?" + names.joined(separator: "&")
    }
}
