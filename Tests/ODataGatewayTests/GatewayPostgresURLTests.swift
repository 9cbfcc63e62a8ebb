import Foundation
import PostgresNIO
import Testing

@testable import ODataGateway

/// `--postgres` URLs: what is wrong is named, and the password never shows in the error.
struct GatewayPostgresURLTests {
    @Test(arguments: [
        ("mysql://oodata:choose-one@127.0.0.1:5432/oodata", "not a postgres://"),
        ("postgres://oodata:choose-one@127.0.0.1:99999/oodata", "outside 1-65535"),
        ("postgres://oodata:choose-one@/oodata", "no host"),
        ("postgres://oodata:choose-one@127.0.0.1/oodata?foo=bar", "'foo' is not a setting"),
        ("postgres://oodata:choose-one@127.0.0.1/oodata?sslmode=require", "sslmode=require"),
        ("postgres://oodata:choose-one@/oodata?host=relative/folder", "no socket folder"),
        ("postgres://oodata:choose-one@127.0.0.1:5432/oodata?port=6000", "another one than the URL's"),
    ])
    func aBadURLIsNamedWithoutItsPassword(url: String, expected: String) {
        do {
            _ = try PostgresURL.configuration(url)
            Issue.record("\(url) was taken")
        } catch let error as GatewayError {
            let text = "\(error)"
            #expect(text.contains(expected), "\(text)")
            #expect(!text.contains("choose-one"), "\(text)")
            #expect(error.status == 400)
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test func portsAndSocketsAreTaken() throws {
        let socket = try PostgresURL.configuration("postgres://oodata@/oodata?host=/run/postgresql&port=5433")
        #expect(socket.unixSocketPath == "/run/postgresql/.s.PGSQL.5433")
        #expect(socket.username == "oodata")
        let tcp = try PostgresURL.configuration("postgres://oodata:pw@db.example:6543/sales")
        #expect(tcp.host == "db.example" && tcp.port == 6543 && tcp.database == "sales" && tcp.password == "pw")
    }
}
