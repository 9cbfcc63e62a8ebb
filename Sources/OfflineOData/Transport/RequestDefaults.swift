import Foundation
import ODataCore

/// What every request to a backend carries, applied in one place for the offline and the
/// online provider: the service root, `urlSuffix`, OData version headers, custom headers and
/// cookies.
struct RequestDefaults: Sendable {
    var serviceRoot: String
    var urlSuffix: String?
    var customHeaders: [String: String]
    var customCookies: [String: String]
    /// Known once `$metadata` has been read; that first request goes without version headers.
    var version: ODataVersion?

    /// The absolute URL for a relative one, with `urlSuffix` applied. An option of the suffix
    /// the URL names already (a next or delta link the service wrote with it, as SAP Gateway and
    /// a sync gateway do) keeps the URL's value and is not added again.
    func absoluteURL(_ url: String) -> String {
        var result = url.contains("://") ? url : serviceRoot + url
        if let suffix = urlSuffix?.trimmingCharacters(in: CharacterSet(charactersIn: "?&")), !suffix.isEmpty {
            func name(_ option: Substring) -> String {
                let raw = option.prefix { $0 != "=" }
                return raw.removingPercentEncoding ?? String(raw)
            }
            let query = result.firstIndex(of: "?").map { result[result.index(after: $0)...] } ?? ""
            let present = Set(query.split(separator: "&").map(name))
            let missing = suffix.split(separator: "&").filter { !present.contains(name($0)) }
            if !missing.isEmpty { result += (result.contains("?") ? "&" : "?") + missing.joined(separator: "&") }
        }
        return result
    }

    /// The GET of the service root that fetches a CSRF token.
    var tokenRequest: TransportRequest { request(method: "GET", url: "", headers: [:], body: []) }

    /// The request to send; `headers` win over the defaults.
    func request(method: String, url: String, headers: [String: String], body: [UInt8]) -> TransportRequest {
        var fields = ODataCore.HTTPHeaders()
        if let version {
            if version.isLegacy {
                fields["MaxDataServiceVersion"] = "2.0"
                fields["DataServiceVersion"] = "2.0"
                fields["Accept"] = "application/json"
            } else {
                fields["OData-Version"] = "4.0"
                fields["OData-MaxVersion"] = "4.01"
                fields["Accept"] = "application/json;odata.metadata=minimal"
            }
        }
        for (name, value) in customHeaders { fields[name] = value }
        if !customCookies.isEmpty {
            fields["Cookie"] = customCookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
        }
        for (name, value) in headers { fields[name] = value }
        return TransportRequest(method: method, url: absoluteURL(url), headers: fields, body: body)
    }
}
