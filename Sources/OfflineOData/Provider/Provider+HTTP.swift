import Foundation
import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// What every request carries (see ``RequestDefaults``).
    var requestDefaults: RequestDefaults {
        var headers = parameters.customHeaders
        if headers["Client-Instance-ID"] == nil { headers["Client-Instance-ID"] = clientInstanceID }
        if let version = parameters.applicationVersion, headers["OOData-App-Version"] == nil {
            headers["OOData-App-Version"] = version
        }
        return RequestDefaults(
            serviceRoot: serviceRoot, urlSuffix: parameters.urlSuffix, customHeaders: headers,
            customCookies: parameters.customCookies, version: serviceVersion)
    }

    /// The absolute URL for a relative one, with `urlSuffix` applied.
    func absoluteURL(_ url: String) -> String { requestDefaults.absoluteURL(url) }

    /// `url` with the `extraStreamParameters` as custom query options, for the requests of
    /// the download stream (`$metadata` and defining-query pages); options the URL names
    /// already are left as they are.
    func withStreamParameters(_ url: String) throws -> String {
        let options = try parameters.extraStreamOptions()
        guard !options.isEmpty else { return url }
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+#;")
        func encode(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text }
        let query = url.firstIndex(of: "?").map { url[url.index(after: $0)...] } ?? ""
        let present = Set(
            query.split(separator: "&").map { $0.split(separator: "=", maxSplits: 1).first.map(String.init) ?? "" })
        let added = options.sorted { $0.key < $1.key }.map { (encode($0.key), encode($0.value)) }.filter {
            !present.contains($0.0)
        }
        guard !added.isEmpty else { return url }
        return url + (url.contains("?") ? "&" : "?") + added.map { $0.0 + "=" + $0.1 }.joined(separator: "&")
    }

    /// Every request to the backend passes here: custom headers and cookies, OData version
    /// headers, `urlSuffix` and `timeout` are applied in this one place.
    func send(
        method: String, url: String, headers: [String: String] = [:], body: [UInt8] = [], expect: Int? = nil,
        timeout: TimeInterval? = nil, retryThrottled: Bool = true
    ) async throws -> TransportResponse {
        let defaults = requestDefaults
        let request = defaults.request(method: method, url: url, headers: headers, body: body)
        let response: TransportResponse
        do {
            response = try await session.send(
                request, timeout: timeout ?? parameters.effectiveTimeout, tokenRequest: defaults.tokenRequest,
                retryThrottled: retryThrottled)
        } catch let error as OfflineODataError {
            throw error
        } catch let error as TransportError {
            throw OfflineODataError(.transport, error.description)
        } catch {
            throw OfflineODataError(.transport, "\(method) \(request.url) failed: \(error)")
        }
        bytesSent += Int64(body.count)
        bytesReceived += Int64(response.body.count)
        if response.headers["OOData-Gateway"] != nil { throughGateway = true }
        if expect != nil, response.status >= 400 {
            throw Self.backendError(response, method: method, url: request.url)
        }
        return response
    }

    static func backendError(_ response: TransportResponse, method: String, url: String) -> OfflineODataError {
        let detail =
            (try? ODataError.parse(response.body, httpStatus: response.status)).map { "\($0.code): \($0.message)" }
            ?? String(decoding: response.body.prefix(300), as: UTF8.self)
        return OfflineODataError(
            .backend, "\(method) \(url) answered \(response.status): \(detail)", httpStatus: response.status)
    }
}
