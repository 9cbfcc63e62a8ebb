public import Foundation

/// The steps long operations report (SPEC §8).
public enum OfflineODataProgressStep: String, Sendable, CaseIterable, Codable {
    case buildingEntityStore, creatingBootStrapDatabase, creatingRequestQueueDatabase, downloadingEntityStore,
         erasingExpiredRequests, loadingMetadata, performingRequestQueueMerge, performingTransactionMerge,
         performingCreateDeleteMerge, processingDefiningQueries, processingRequests, reapplyingChanges,
         analyzingReceivedData, receivingDataFromServer, removingDeletedRelationships, removingRemoveAfterUploadRequests,
         sendingDataToServer, sendingEntityStoreDatabase, sendingRequestQueueDatabase, uploadPreprocessing, waitingForDownload
}

/// Which operation a progress update belongs to.
public enum OfflineODataOperation: String, Sendable, Codable {
    case open, download, upload, sendStore
}

/// One progress update.
public struct OfflineODataProgress: Sendable {
    /// The operation reporting.
    public var operation: OfflineODataOperation
    /// The step it has reached.
    public var step: OfflineODataProgressStep
    /// 1-based number of the current step.
    public var stepNumber: Int
    /// How many steps the operation can pass through (may grow while it runs).
    public var totalSteps: Int
    /// When the update was made.
    public var time: Date
    /// Step parameters: `name`, `url`, `number`, `count`, `receivedBytes`, `sentBytes`, `totalBytes`.
    public var parameters: [String: String]
    /// The default message in the device language (English when it has no translation).
    public var message: String
}

/// A request the backend rejected during upload (SPEC §7).
public struct OfflineODataFailedRequest: Sendable, Hashable {
    /// The backend's HTTP status (424 for a request not sent because one it depends on failed).
    public var httpStatus: Int
    /// The queue's request ID (also the ErrorArchive key).
    public var requestID: Int64
    /// The request's custom tag.
    public var customTag: String?
    /// The backend's error code.
    public var code: String
    /// The backend's error message.
    public var message: String
    /// The backend's inner error, as JSON text.
    public var innerError: String?
    /// Method, URL and body of the request as queued.
    public var method: String
    public var url: String
    public var body: String?
}

/// Events of a provider, for apps that prefer an `AsyncSequence` to the delegate.
public enum OfflineODataEvent: Sendable {
    case progress(OfflineODataProgress)
    case requestFailed(OfflineODataFailedRequest)
}

/// Receives progress and failures. Calls arrive on the provider's executor; do not block.
public protocol OfflineODataDelegate: AnyObject, Sendable {
    /// A long operation moved to another step or reported bytes.
    func offlineODataProvider(didUpdate progress: OfflineODataProgress)
    /// The backend rejected a request during upload. The upload goes on.
    func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest)
}

extension OfflineODataDelegate {
    /// Does nothing by default.
    public func offlineODataProvider(didUpdate progress: OfflineODataProgress) {}
    /// Does nothing by default.
    public func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {}
}

/// Default progress messages in every supported language, kept as a resource.
public struct ProgressMessages: Sendable {
    struct Language: Decodable, Sendable {
        var format: String
        var steps: [String: String]
    }

    let languages: [String: Language]

    /// The shared catalogue from the bundled resource.
    public static let shared = ProgressMessages()

    init() {
        var loaded: [String: Language] = [:]
        if let url = Bundle.module.url(forResource: "progress-messages", withExtension: "json"),
           let data = try? Data(contentsOf: url),
           let decoded = try? JSONDecoder().decode([String: Language].self, from: data) {
            loaded = decoded
        }
        languages = loaded
    }

    /// Language codes with messages.
    public var availableLanguages: [String] { languages.keys.sorted() }

    /// The language to use for `locale`: exact (`zh-Hant`), then its language code, then English.
    public func language(for locale: Locale) -> String {
        let identifier = locale.identifier.replacingOccurrences(of: "_", with: "-")
        let code = locale.language.languageCode?.identifier ?? identifier.split(separator: "-").first.map(String.init) ?? "en"
        if code == "zh" {
            let script = locale.language.script?.identifier
            let region = locale.region?.identifier
            let traditional = script == "Hant" || (script == nil && ["TW", "HK", "MO"].contains(region ?? ""))
            return traditional ? "zh-Hant" : "zh-Hans"
        }
        if code == "nb" || code == "nn" { return languages["no"] != nil ? "no" : "en" }
        if languages[identifier] != nil { return identifier }
        return languages[code] != nil ? code : "en"
    }

    /// The message for a step in `language`, with the parameters filled in.
    public func message(step: OfflineODataProgressStep, number: Int, total: Int, parameters: [String: String], language: String) -> String {
        let lang = languages[language] ?? languages["en"]
        var description = lang?.steps[step.rawValue] ?? languages["en"]?.steps[step.rawValue] ?? step.rawValue
        for (name, value) in parameters { description = description.replacingOccurrences(of: "{\(name)}", with: value) }
        // Unfilled optional parts disappear.
        while let open = description.range(of: "{"), let close = description.range(of: "}", range: open.upperBound..<description.endIndex) {
            description.removeSubrange(open.lowerBound..<close.upperBound)
        }
        description = description.trimmingCharacters(in: .whitespaces)
        let format = lang?.format ?? "Performing step {step} of {total} : {message}"
        return format.replacingOccurrences(of: "{step}", with: "\(number)").replacingOccurrences(of: "{total}", with: "\(total)")
            .replacingOccurrences(of: "{message}", with: description)
    }
}

/// Numbers the steps of one operation and words its updates.
struct ProgressReporter: Sendable {
    let operation: OfflineODataOperation
    /// Every step the operation can pass through, in order.
    var plan: [OfflineODataProgressStep]
    let language: String

    func event(_ step: OfflineODataProgressStep, _ parameters: [String: String]) -> OfflineODataEvent {
        let number = (plan.firstIndex(of: step) ?? plan.count - 1) + 1
        let message = ProgressMessages.shared.message(step: step, number: number, total: plan.count, parameters: parameters, language: language)
        return .progress(OfflineODataProgress(operation: operation, step: step, stepNumber: number, totalSteps: plan.count, time: Date(),
                                              parameters: parameters, message: message))
    }
}
