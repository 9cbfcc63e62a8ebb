"""Drives the reference service's V2 root with SAP's pyodata client and prints one JSON
object of results for the Swift test to check. Usage: pyodata_client.py SERVICE_URL"""
import datetime
import json
import sys

import pyodata
import pyodata.exceptions
import requests

url = sys.argv[1]
session = requests.Session()
client = pyodata.Client(url, session)
out = {}

# Metadata.
out["entity_sets"] = sorted(es.name for es in client.schema.entity_sets)

# Reads: filter, top, skip, orderby, inlinecount, expand, get by key, navigation.
orders = client.entity_sets.SalesOrders.get_entities().filter("PartnerID eq 'BP1'").order_by("OrderID desc").top(3).skip(1).count(inline=True).execute()
out["filtered_orders"] = [o.OrderID for o in orders]
out["inline_count"] = orders.total_count
expanded = client.entity_sets.SalesOrders.get_entities().filter("OrderID eq 'SO1'").expand("Items").execute()
out["expanded_items"] = len(expanded[0].Items)
partner = client.entity_sets.BusinessPartners.get_entity("BP2").execute()
out["partner_name"] = partner.CompanyName
out["partner_city"] = partner.Address["City"]
contacts = partner.nav("Contacts").get_entities().execute()
out["partner_contacts"] = sorted(c.FirstName for c in contacts)
count = client.entity_sets.Products.get_entities().count().execute()
out["product_count"] = count

# Create, update, delete.
created = client.entity_sets.ProductCategories.create_entity().set(CategoryID="PY1", Name="From pyodata").execute()
out["created"] = created.CategoryID
# The service wants If-Match on changes (428 without it), as SAP Gateway does.
try:
    client.entity_sets.ProductCategories.update_entity(CategoryID="PY1").set(Name="No If-Match").execute()
    out["update_without_if_match"] = 200
except pyodata.exceptions.HttpError as error:
    out["update_without_if_match"] = error.response.status_code
update = client.entity_sets.ProductCategories.update_entity(CategoryID="PY1").set(Name="Renamed by pyodata")
update.add_headers({"If-Match": "*"})
update.execute()
out["updated"] = client.entity_sets.ProductCategories.get_entity("PY1").execute().Name
delete = client.entity_sets.ProductCategories.delete_entity("PY1")
delete.add_headers({"If-Match": "*"})
delete.execute()
try:
    client.entity_sets.ProductCategories.get_entity("PY1").execute()
    out["deleted"] = False
except pyodata.exceptions.HttpError as error:
    out["deleted"] = error.response.status_code == 404

# A batch with a change set.
batch = client.create_batch()
changeset = client.create_changeset()
changeset.add_request(client.entity_sets.ProductCategories.create_entity().set(CategoryID="PY2", Name="Batch one"))
changeset.add_request(client.entity_sets.ProductCategories.create_entity().set(CategoryID="PY3", Name="Batch two"))
batch.add_request(changeset)
batch.add_request(client.entity_sets.ProductCategories.get_entity("C1"))
batch.execute()
out["batch_created"] = sorted(c.CategoryID for c in client.entity_sets.ProductCategories.get_entities().filter("startswith(CategoryID,'PY')").execute())

# A single property (`{"d":{"CompanyName":…}}`), a DateTimeOffset (`/Date(ms+0000)/`, read as UTC), V2 literals,
# a nested expand A/B and $links.
out["property"] = partner.get_proprty("CompanyName").execute()
out["created_at"] = partner.CreatedAt.astimezone(datetime.timezone.utc).isoformat()
big = client.entity_sets.SalesOrders.get_entities().filter("GrossAmount gt 4000M and substringof('SO1',OrderID)").execute()
out["big_orders"] = sorted(o.OrderID for o in big)
nested = client.entity_sets.BusinessPartners.get_entities().filter("PartnerID eq 'BP1'").expand("SalesOrders/Items").execute()
out["nested_items"] = sum(len(o.Items) for o in nested[0].SalesOrders)
links = session.get(url + "SalesOrders('SO1')/$links/Items", headers={"Accept": "application/json"}).json()
out["links"] = len(links["d"]["results"])

# A function import.
products = client.functions.GetProductsByCategory.parameter("CategoryID", "C3").execute()
out["function_categories"] = sorted({p.CategoryID for p in products})

print(json.dumps(out))
