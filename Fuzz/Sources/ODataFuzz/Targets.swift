import Foundation
import ODataCore

/// One fuzz target: takes the fuzzer's bytes and runs one parser on them. A target may throw the
/// parser's own errors (bad input is expected); it must never crash, trap or hang.
struct FuzzTarget: Sendable {
    var name: String
    var summary: String
    var run: @Sendable ([UInt8]) -> Void
}

/// The model the URL target binds against and the payload readers type values with: the file named
/// by `OODATA_FUZZ_METADATA`, else none.
let fuzzModel: Model? = {
    guard let path = ProcessInfo.processInfo.environment["OODATA_FUZZ_METADATA"],
          let data = FileManager.default.contents(atPath: path) else { return nil }
    return try? MetadataParser().parse(data)
}()

/// Every target, by the name `OODATA_FUZZ_TARGET` selects.
let fuzzTargets: [FuzzTarget] = [
    FuzzTarget(name: "url", summary: "URL parser (V4 or V2 grammar by the first byte) and binder") { bytes in
        guard let first = bytes.first else { return }
        let version: ODataVersion = first & 1 == 0 ? .v4 : .v2
        let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
        guard let parsed = try? URLParser(version: version).parse(text) else { return }
        if let model = fuzzModel {
            _ = try? RequestBinder(model: model).bind(parsed, input: text)
        }
    },
    FuzzTarget(name: "v4json", summary: "V4 JSON reader: entity, collection and value") { bytes in
        let reader = V4JSONReader(model: fuzzModel)
        _ = try? reader.readEntity(bytes)
        _ = try? reader.readCollection(bytes)
        _ = try? reader.readValue(bytes, type: nil)
    },
    FuzzTarget(name: "v2json", summary: "V2 verbose JSON reader: entity and collection") { bytes in
        let reader = V2JSONReader(model: fuzzModel)
        _ = try? reader.readEntity(bytes)
        _ = try? reader.readCollection(bytes)
    },
    FuzzTarget(name: "csdl", summary: "CSDL XML metadata parser") { bytes in
        _ = try? MetadataParser().parse(Data(bytes))
    },
    FuzzTarget(name: "multipart", summary: "multipart/mixed batch reader (request and response parts)") { bytes in
        _ = try? MultipartBatch.read(bytes)
    },
    FuzzTarget(name: "jsonbatch", summary: "JSON batch reader (requests and responses)") { bytes in
        _ = try? JSONBatchRequest.read(bytes)
        _ = try? JSONBatchResponse.read(bytes)
    },
    FuzzTarget(name: "error", summary: "OData error body parser (V4 and V2 shapes)") { bytes in
        _ = try? ODataError.parse(bytes, httpStatus: 400)
    },
]

/// The target `OODATA_FUZZ_TARGET` names; the process stops with a list when it names none.
let selectedTarget: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["OODATA_FUZZ_TARGET"] ?? ""
    if let target = fuzzTargets.first(where: { $0.name == name }) { return target }
    var message = "OODATA_FUZZ_TARGET must name one of:\n"
    for target in fuzzTargets { message += "  \(target.name)\t\(target.summary)\n" }
    FileHandle.standardError.write(Data(message.utf8))
    exit(2)
}()

/// libFuzzer's entry point: one input per call.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
    selectedTarget.run(bytes)
    return 0
}

/// libFuzzer's driver, for starting it from the entry point SwiftPM links executables with.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<CInt>,
                     _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

/// The entry point SwiftPM expects of the `ODataFuzz` executable (`-parse-as-library` leaves
/// none): it hands the command line to libFuzzer.
@_cdecl("ODataFuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
}
