<#
.SYNOPSIS
Creates what `sqlease serve` needs on Azure SQL with Entra ID-only
authentication: a resource group, a logical server whose Entra ID admin is
the signed-in user, a database, a user-assigned managed identity for the
service, and firewall rules. Then it prints the T-SQL that gives the
identity the serving role of deploy/grants/sqlserver.sql.

.NOTES
Nothing on the machine this repository is developed on can run it (no
PowerShell, no Azure): it has not been run. Review it before you do.
Requires the Az module (Install-Module Az) and Connect-AzAccount.
#>
param(
    [Parameter(Mandatory)] [string] $SubscriptionId,
    [string] $ResourceGroup = 'cristp-reltaskexec',
    [string] $Location = 'westus2',
    [string] $ServerName = "sqlease-$((Get-Random -Maximum 99999).ToString('00000'))",
    [string] $DatabaseName = 'sqlease',
    [string] $IdentityName = 'sqlease-service',
    # Public IPs allowed to connect (the service's egress addresses).
    [string[]] $AllowedIps = @(),
    # Let other Azure services (e.g. an App Service or AKS with public egress) connect.
    [switch] $AllowAzureServices
)
$ErrorActionPreference = 'Stop'

Set-AzContext -SubscriptionId $SubscriptionId | Out-Null
$me = Get-AzADUser -SignedIn

New-AzResourceGroup -Name $ResourceGroup -Location $Location -Force | Out-Null

# Entra ID-only: no SQL logins, no passwords; the admin is the signed-in user.
New-AzSqlServer -ResourceGroupName $ResourceGroup -ServerName $ServerName -Location $Location `
    -EnableActiveDirectoryOnlyAuthentication -ExternalAdminName $me.UserPrincipalName -ExternalAdminSID $me.Id `
    -MinimalTlsVersion '1.2' | Out-Null

# General purpose serverless: cheap when idle; sqlease's idle load is under 1 statement/s.
New-AzSqlDatabase -ResourceGroupName $ResourceGroup -ServerName $ServerName -DatabaseName $DatabaseName `
    -Edition 'GeneralPurpose' -ComputeModel 'Serverless' -ComputeGeneration 'Gen5' -VCore 1 `
    -AutoPauseDelayInMinutes 60 | Out-Null

$identity = New-AzUserAssignedIdentity -ResourceGroupName $ResourceGroup -Name $IdentityName -Location $Location

foreach ($ip in $AllowedIps) {
    New-AzSqlServerFirewallRule -ResourceGroupName $ResourceGroup -ServerName $ServerName `
        -FirewallRuleName "allow-$($ip -replace '[^0-9a-fA-F]', '-')" -StartIpAddress $ip -EndIpAddress $ip | Out-Null
}
if ($AllowAzureServices) {
    New-AzSqlServerFirewallRule -ResourceGroupName $ResourceGroup -ServerName $ServerName -AllowAllAzureIPs | Out-Null
}

$fqdn = "$ServerName.database.windows.net"
Write-Output @"
Created $fqdn/$DatabaseName and the managed identity $IdentityName (client id $($identity.ClientId)).

1. As the Entra ID admin ($($me.UserPrincipalName)), in database $DatabaseName, give the identity
   the roles of deploy/grants/sqlserver.sql (one identity migrating and serving here; split them
   for least privilege, a second identity for `sqlease migrate`):

     CREATE USER [$IdentityName] FROM EXTERNAL PROVIDER;
     ALTER ROLE db_ddladmin ADD MEMBER [$IdentityName];   -- only the migrating identity needs this
     GRANT SELECT, INSERT, UPDATE, DELETE ON SCHEMA::dbo TO [$IdentityName];

2. Run the service with the identity attached (AZURE_CLIENT_ID=$($identity.ClientId)):

     sqlease migrate --db 'sqlserver://$fqdn?database=$DatabaseName&fedauth=ActiveDirectoryDefault'
     sqlease serve   --db 'sqlserver://$fqdn?database=$DatabaseName&fedauth=ActiveDirectoryDefault' --migrate=false
"@
