import Foundation
import InteropSupport
import ODataGateway
import Testing

/// Issue 35, item 4: the INI configuration shaped like SAP's application configuration file; a
/// wrong key or value is refused naming its line, at start.
@Suite struct GatewayConfigurationTests {
    static let good = """
        ; the sales backend
        [endpoint]
        name=sales
        url=http://127.0.0.1:8080/odata/v4/
        track_deltas=ALWAYS
        shared_authorization=Basic c2hhcmVkOnB3
        tombstone_retention=60
        supports_batch=N
        prepopulate_offline_db=SHARED-ONLY
        prepopulate_offline_db_interval=30
        indexed_type=Products

        [defining_query]
        name=Products
        query=Products
        is_shared_data=Y
        refresh_interval=5

        [defining_query]
        name=Orders
        query=SalesOrders?$expand=Items&$filter=Status eq 'open'
        track_deltas=NEVER
        """

    @Test func aGoodFileGivesItsBackendsAndQueries() throws {
        let (configuration, warnings) = try GatewayConfiguration.parse(ini: Self.good)
        // One endpoint: at its name and at the root.
        #expect(configuration.backends.map(\.name) == ["sales", ""])
        let sales = try #require(configuration.backends.first)
        #expect(sales.url == "http://127.0.0.1:8080/odata/v4/")
        #expect(sales.trackDeltas == .always)
        #expect(sales.sharedAuthorization == "Basic c2hhcmVkOnB3")
        #expect(!sales.supportsBatch)
        #expect(sales.sharedQueries == ["Products"])
        #expect(sales.queryRefreshInterval == ["Products": 300])
        #expect(sales.queryTracking.count == 1)
        #expect(sales.queryTracking.first?.value == .never)
        #expect(sales.queryTracking.first?.key.hasPrefix("SalesOrders?$expand=Items&$filter=") == true)
        #expect(configuration.tombstoneRetention == 3600)
        #expect(sales.prepopulate == .sharedOnly)
        #expect(sales.prepopulateInterval == 1800)
        #expect(warnings == ["line 11: indexed_type is not used by this gateway yet"])
    }

    @Test(arguments: [
        ("[endpoint]\nname=a\nurl=http://h/\ncolour=blue", 4, "unknown key colour"),
        ("[endpoint]\nname=a\nurl=http://h/\ntrack_deltas=SOMETIMES", 4, "use AUTO, ALWAYS or NEVER"),
        ("[endpoint]\nname=a\n", 1, "needs url="),
        ("[endpoint]\nname=a\nurl=http://h/\nprepopulate_offline_db=ALL", 4, "use Y, SHARED-ONLY or N"),
        ("[endpoint]\nname=a\nurl=http://h/\nsupports_batch=sometimes", 4, "supports_batch=sometimes: use Y or N"),
        ("[endpoint]\nname=a\nurl=ftp://h/", 3, "not an http(s) URL"),
        ("[defining_query]\nname=Products", 1, "before any [endpoint]"),
        ("[endpoint]\nname=a\nurl=http://h/\n[defining_query]\nname=P\nis_shared_data=maybe", 6, "use Y or N"),
        ("[endpoint]\nname=a\nurl=http://h/\n[defining_query]\nname=P\nrefresh_interval=-1", 6, "minutes, 0 or more"),
        ("[endpoint]\nname=a\nurl=http://h/\n[defining_query]\nname=P\nendpoint_name=b", 6, "names no [endpoint]"),
        ("[backend]\nname=a", 1, "unknown section [backend]"),
        ("name=a", 1, "before any [endpoint]"),
        ("[endpoint]\nname=a\nname=b", 3, "appears twice"),
        ("[endpoint]\njust text", 2, "is not key=value"),
        ("[endpoint]\nname=a\nurl=http://h/\nthrottle_device=fast", 4, "throttle_device=fast: give a number"),
        ("[endpoint]\nname=a\nurl=http://h/\nthrottle_user=10/s,burst=0", 4, "is not burst=N"),
        ("[endpoint]\nname=a\nurl=http://h/\nthrottle_user=0/s", 4, "requests per period"),
        ("[admin]\ntoken=short\n[endpoint]\nname=a\nurl=http://h/", 1, "at least 16 characters"),
        ("[admin]\nuser=ops\n[endpoint]\nname=a\nurl=http://h/", 1, "needs a password= of at least 12"),
        ("[admin]\ncolour=x\n[endpoint]\nname=a\nurl=http://h/", 2, "unknown key colour in [admin]"),
        (
            "[admin]\ntoken=0123456789abcdef\n[admin]\ntoken=0123456789abcdef\n[endpoint]\nname=a\nurl=http://h/", 3,
            "[admin] appears twice"
        ),
    ])
    func aWrongLineIsRefusedByNumber(text: String, line: Int, message: String) {
        do {
            _ = try GatewayConfiguration.parse(ini: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line, "\(error)")
            #expect(error.message.contains(message), "\(error)")
            #expect(error.description.hasPrefix("line \(line): "))
        }
    }

    /// Issue 56: `[admin]` access and throttling per endpoint, read from the file.
    @Test func adminAccessAndThrottlesAreRead() throws {
        let text = """
            [admin]
            token=0123456789abcdef-token
            user=ops
            password=ops-password-long

            [endpoint]
            name=sales
            url=http://127.0.0.1:8080/odata/v4/
            throttle_device=600/min,burst=20
            throttle_user=5/s
            """
        let (configuration, _) = try GatewayConfiguration.parse(ini: text)
        let admin = try #require(configuration.admin)
        #expect(admin.allows("Bearer 0123456789abcdef-token"))
        #expect(admin.allows("Basic " + Data("ops:ops-password-long".utf8).base64EncodedString()))
        #expect(!admin.allows("Bearer 0123456789abcdef-toke"))
        #expect(!admin.allows("Basic " + Data("ops:ops-password-lon".utf8).base64EncodedString()))
        #expect(!admin.allows("0123456789abcdef-token"))
        #expect(!admin.allows(nil))
        let sales = try #require(configuration.backends.first)
        #expect(sales.deviceThrottle == ThrottleRate(perSecond: 10, burst: 20))
        #expect(sales.userThrottle == ThrottleRate(perSecond: 5, burst: 5))
        #expect(sales.deviceThrottle?.description == "10/s,burst=20")
        #expect(try ThrottleRate(parsing: "30/h").description == "0.5/min,burst=1")
        #expect(configuration.summary.adminAccess == ["token", "basic"])
    }

    @Test func theCommandRefusesAWrongFileAtStart() throws {
        let tool = try #require(GatewayCrashTests.binary, "oodata was not built next to the tests")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-\(UUID().uuidString).ini")
        try Data("[endpoint]\nname=a\nurl=http://127.0.0.1:9/\nrefresh=5\n".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = tool
        process.arguments = ["gateway", "--config", file.path, "--postgres", "postgres://postgres@127.0.0.1:9/x"]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try ProcessLaunch.run(process)
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 1)
        #expect(text.contains("line 4: unknown key refresh in [endpoint]"), "\(text)")
    }

    /// Issue 52: JWT verification per endpoint, one issuer with the endpoint's keys and more in
    /// `[jwt_issuer]` sections; a verification that cannot verify is refused with its line.
    @Test func jwtIssuersAreReadPerEndpoint() throws {
        let text = """
            [endpoint]
            name=sales
            url=http://127.0.0.1:8080/odata/v4/
            jwt_issuer=https://idp-a.test/
            jwt_audience=sales-app
            jwt_jwks=/etc/idp/jwks.json
            identity_cookies=MYSAPSSO2, JSESSIONID

            [jwt_issuer]
            issuer=https://idp-b.test/
            audience=sales-app
            hs_secret=0123456789abcdef0123456789abcdef
            """
        let (configuration, _) = try GatewayConfiguration.parse(ini: text)
        let sales = try #require(configuration.backends.first)
        #expect(sales.jwtVerification.map(\.issuer) == ["https://idp-a.test/", "https://idp-b.test/"])
        #expect(sales.jwtVerification.first?.jwks == "/etc/idp/jwks.json")
        #expect(sales.jwtVerification.last?.hmacSecret == "0123456789abcdef0123456789abcdef")
        #expect(sales.identityCookies == ["MYSAPSSO2", "JSESSIONID"])
        // The secret never shows in a description.
        #expect(!"\(sales.jwtVerification)".contains("0123456789abcdef"))
        let refused: [(String, Int, String)] = [
            ("jwt_issuer=https://idp/\njwt_jwks=/k.json", 4, "needs jwt_audience"),
            ("jwt_issuer=https://idp/\njwt_audience=a", 4, "needs jwt_jwks"),
            ("jwt_audience=a", 4, "need jwt_issuer"),
            ("jwt_issuer=https://idp/\njwt_audience=a\njwt_hs_secret=short", 4, "at least 32 bytes"),
            ("jwt_issuer=https://idp/\njwt_audience=a\njwt_jwks=http://idp.test/keys", 4, "must be https"),
        ]
        for (lines, line, words) in refused {
            let body = "[endpoint]\nname=s\nurl=http://127.0.0.1:8080/\n" + lines
            do {
                _ = try GatewayConfiguration.parse(ini: body)
                Issue.record("accepted: \(lines)")
            } catch {
                #expect(error.line == line && error.message.contains(words), "\(lines): \(error)")
            }
        }
        let orphan = "[endpoint]\nname=s\nurl=http://127.0.0.1:8080/\n[jwt_issuer]\nissuer=https://idp/\n"
        #expect(throws: GatewayConfigurationError.self) { try GatewayConfiguration.parse(ini: orphan) }
    }
}
